// Builds (`/builds`): each push or pull request a forge delivered, newest listed by repository,
// with its task group and state, or why it made no tasks (a refused or broken .taskcluster.yml).

import { get, withQuery } from '../api.js';
import { badge, fill, h, pagedListing, when } from '../view.js';

export async function buildsPage(main) {
  const rows = h('tbody', { id: 'builds' });
  const more = h('div', { class: 'pager' });
  fill(main, h('h1', {}, 'Builds'),
    h('p', { class: 'muted' }, 'Pushes and pull requests delivered to /api/github/v1/github (or shoal push); listing them takes github:list-builds.'),
    h('div', { class: 'scroll' }, h('table', { class: 'list' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Repository'), h('th', {}, 'Commit'), h('th', {}, 'Event'), h('th', {}, 'State'),
        h('th', {}, 'Task group'), h('th', {}, 'Created'), h('th', { class: 'wide' }, 'Error'))),
      rows)), more);
  await pagedListing(more, async (token) => {
    const page = await get(withQuery('/api/github/v1/builds', { limit: 100, continuationToken: token }));
    rows.append(...page.builds.map((build) => h('tr', { 'data-build': build.sha, class: build.state === 'error' ? 'failed-row' : null },
      h('td', { class: 'mono' }, `${build.organization}/${build.repository}`),
      h('td', { class: 'mono', title: build.sha }, build.sha.slice(0, 12)),
      h('td', {}, build.pullRequestNumber ? `${build.eventType} #${build.pullRequestNumber}` : build.eventType),
      h('td', {}, badge(build.state === 'success' ? 'completed' : build.state === 'failure' || build.state === 'error' ? 'failed' : 'pending'), ' ', build.state),
      h('td', {}, build.state === 'error' ? h('span', { class: 'mono muted' }, '—') : h('a', { href: `/tasks/groups/${build.taskGroupId}`, class: 'mono' }, build.taskGroupId)),
      h('td', {}, when(build.created)),
      h('td', { class: 'wide' }, build.error ? h('pre', { class: 'mono small error' }, build.error) : null))));
    if (!rows.children.length) rows.append(h('tr', {}, h('td', { class: 'muted', colspan: 7 }, 'No builds yet.')));
    return page.continuationToken;
  });
}
