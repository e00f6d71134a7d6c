"""The project's taskgraph extensions.

taskgraph 24.5.1 links a task to its source file only for repositories on github.com; this
project is served by another forge (Gitea, Forgejo, or the tests' own on loopback), so it
links to the file at the commit in the forge's usual form, `<repo>/src/commit/<rev>/<path>`.
A project on github.com needs none of this, on Taskcluster or on Shoal.
"""

from taskgraph.parameters import Parameters

_github_file_url = Parameters.file_url


def _file_url(self, path, pretty=False):
    repo = self["head_repository"]
    if self["repository_type"] != "git" or repo.startswith(("https://github.com/", "git@github.com:")):
        return _github_file_url(self, path, pretty=pretty)
    repo = repo[: -len(".git")] if repo.endswith(".git") else repo
    return f"{repo}/src/commit/{self['head_rev']}/{path}"


def register(graph_config):
    """Called by taskgraph with the graph's configuration, before any kind is loaded."""
    Parameters.file_url = _file_url
