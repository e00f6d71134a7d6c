// Secrets (`/secrets`, Taskcluster's URL): the names of the secrets, for a client allowed to
// list them. Their values are never shown here.

import { get, withQuery } from '../api.js';
import { fill, h, pagedListing } from '../view.js';

export async function secretsPage(main) {
  const names = h('ul', { id: 'secret-names', class: 'plain mono' });
  const more = h('div', { class: 'pager' });
  fill(main, h('h1', {}, 'Secrets'),
    h('p', { class: 'muted' }, 'Names only: a secret\'s value is read with secrets:get:<name>, through the API or the CLI (shoal secrets get).'),
    names, more);
  await pagedListing(more, async (token) => {
    const page = await get(withQuery('/api/secrets/v1/secrets', { limit: 500, continuationToken: token }));
    names.append(...page.secrets.map((name) => h('li', { 'data-secret': name }, name)));
    if (!names.children.length) names.append(h('li', { class: 'muted' }, 'No secrets.'));
    return page.continuationToken;
  });
}
