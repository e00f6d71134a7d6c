#!/bin/sh
# Writes a `docker save` image archive without a container daemon, for a task to publish as
# an artifact that later tasks name as their image ({"type": "task-image", ...}).
#
#   docker-save.sh OUTPUT LAYER_DIR...
#
# Each LAYER_DIR becomes one layer, lowest first: its files as they are, owned by root, with
# whiteouts (`.wh.<name>` deletes <name> of lower layers, `.wh..wh..opq` empties its
# directory of them) as any image has them. Settings, from the environment:
#   IMAGE_CONFIG     the config's `config` object (JSON), as {"Env": ["PATH=/bin"],
#                    "WorkingDir": "/builds/worker", "Cmd": ["sh"]}; default {}
#   IMAGE_USER_DIRS  directories (relative, space-separated) of the top layer given to uid
#                    1000, which the task's user then owns in its run
# Needs only tar (GNU), sha256sum and sh.
set -eu
out=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/blobs/sha256"
layers=""
diff_ids=""
count=0
for dir in "$@"; do
    count=$((count + 1))
    tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$dir" -cf "$work/layer.tar" .
    if [ "$count" = "$#" ] && [ -n "${IMAGE_USER_DIRS:-}" ]; then
        for owned in $IMAGE_USER_DIRS; do
            tar --numeric-owner --owner=1000 --group=1000 --mtime=@0 --no-recursion -C "$dir" -rf "$work/layer.tar" "./$owned"
        done
    fi
    sum=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
    mv "$work/layer.tar" "$work/blobs/sha256/$sum"
    layers="$layers${layers:+,}\"blobs/sha256/$sum\""
    diff_ids="$diff_ids${diff_ids:+,}\"sha256:$sum\""
done
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
esac
printf '{"architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":[%s]}}' \
    "$arch" "${IMAGE_CONFIG:-{\}}" "$diff_ids" > "$work/config.json"
config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/blobs/sha256/$config"
printf '[{"Config":"blobs/sha256/%s","RepoTags":[],"Layers":[%s]}]' "$config" "$layers" > "$work/manifest.json"
tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$work" -cf "$out" manifest.json blobs
