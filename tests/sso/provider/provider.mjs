// A real OpenID Connect provider (panva's oidc-provider) for the single sign-on journey.
// Usage: node provider.mjs CONFIG.json; CONFIG holds {port, client: {...}, accounts: {...}}.
// Its development interactions serve a login form (any password) and a consent page.
// Prints "ready <issuer>" on stdout once it listens.
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

const provider = new Provider(issuer, {
  clients: [config.client],
  scopes: ['openid', 'email', 'profile', 'groups', 'posix'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name', 'given_name', 'family_name'],
    groups: ['groups'],
    posix: ['posix_username', 'uid_number', 'gid_number'],
  },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const claims = config.accounts[id];
    if (!claims) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...claims }; } };
  },
});
provider.proxy = false;

provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
