//! `shoal render-taskcluster-yml` (hidden): renders a push's `.taskcluster.yml` for the server,
//! in a process of its own under CPU, memory and output limits, since whoever pushes writes the
//! template and JSON-e sets no bound of its own. Reads a `Rendering` (JSON) on stdin, writes
//! `{"ok": Rendered}` or `{"error": "..."}` on stdout.

use std::io::{Read, Write};

use anyhow::Context;
use nix::sys::resource::{Resource, setrlimit};
use serde_json::json;
use shoal_engine::TaskId;
use shoal_engine::github::Rendering;

/// Most bytes of input read.
const MAX_INPUT: u64 = 64 << 20;
/// Seconds of CPU the rendering may use.
const CPU_SECS: u64 = 20;
/// Most bytes of memory (address space) it may map.
const MEMORY: u64 = 1 << 30;

pub(crate) fn render() -> anyhow::Result<()> {
    setrlimit(Resource::RLIMIT_CPU, CPU_SECS, CPU_SECS).context("limiting CPU")?;
    setrlimit(Resource::RLIMIT_AS, MEMORY, MEMORY).context("limiting memory")?;
    let mut input = Vec::new();
    std::io::stdin().take(MAX_INPUT).read_to_end(&mut input).context("reading the rendering")?;
    let rendering: Rendering = serde_json::from_slice(&input).context("reading the rendering")?;
    let mut new_id = || TaskId::parse(&slugid::nice()).unwrap_or_else(|| unreachable!("slugid::nice makes slugids"));
    let answer = match rendering.render(&mut new_id) {
        Ok(rendered) => json!({ "ok": rendered }),
        Err(error) => json!({ "error": error }),
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &answer).context("writing the rendering")?;
    out.flush().context("writing the rendering")?;
    Ok(())
}
