"""The project's taskgraph extensions.

taskgraph 24.5.1 knows the URLs of repositories on github.com and hg.mozilla.org only: it links
a task to its source file there, and names the role an action task must hold
(`assume:repo:<host>/<owner>/<repo>:action:<permission>`) from them. This project is served by
another forge (Gitea, Forgejo, or the tests' own on loopback), so it teaches taskgraph both for
its URL, in the forms Taskcluster and Shoal give roles. A project on github.com needs none of
this, on Taskcluster or on Shoal.
"""

from types import SimpleNamespace
from urllib.parse import urlsplit

import taskgraph.actions.registry
from taskgraph.parameters import Parameters

_github_file_url = Parameters.file_url
_parse_repo_url = taskgraph.actions.registry.parse


def _on_github(url):
    return url.startswith(("https://github.com/", "git@github.com:", "https://hg.mozilla.org/"))


def _file_url(self, path, pretty=False):
    repo = self["head_repository"]
    if self["repository_type"] != "git" or _on_github(repo):
        return _github_file_url(self, path, pretty=pretty)
    repo = repo[: -len(".git")] if repo.endswith(".git") else repo
    return f"{repo}/src/commit/{self['head_rev']}/{path}"


def _parse(url):
    if _on_github(url):
        return _parse_repo_url(url)
    parts = urlsplit(url)
    path = parts.path.strip("/")
    path = path[: -len(".git")] if path.endswith(".git") else path
    return SimpleNamespace(taskcluster_role_prefix=f"repo:{parts.netloc}/{path}")


def register(graph_config):
    """Called by taskgraph with the graph's configuration, before any kind is loaded."""
    Parameters.file_url = _file_url
    taskgraph.actions.registry.parse = _parse
