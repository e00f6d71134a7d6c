// Hawk request signing and signed URLs as Taskcluster's clients make them (no payload hash, no ext), over
// SHA-256 and HMAC written out here: WebCrypto is only offered to https and localhost pages,
// and Shoal is often reached over plain http inside a network.

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

/** SHA-256 of `bytes` (a Uint8Array). */
export function sha256(bytes) {
  const bitLength = bytes.length * 8;
  const padded = new Uint8Array(((bytes.length + 9 + 63) >> 6) << 6);
  padded.set(bytes);
  padded[bytes.length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(bitLength / 0x100000000));
  view.setUint32(padded.length - 4, bitLength >>> 0);
  const hash = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let block = 0; block < padded.length; block += 64) {
    for (let t = 0; t < 16; t++) w[t] = view.getUint32(block + t * 4);
    for (let t = 16; t < 64; t++) {
      const s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >>> 3);
      const s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, h] = hash;
    for (let t = 0; t < 64; t++) {
      const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      [h, g, f, e, d, c, b, a] = [g, f, e, (d + t1) >>> 0, c, b, a, (t1 + t2) >>> 0];
    }
    [a, b, c, d, e, f, g, h].forEach((value, i) => { hash[i] = (hash[i] + value) >>> 0; });
  }
  const out = new Uint8Array(32);
  const outView = new DataView(out.buffer);
  hash.forEach((value, i) => outView.setUint32(i * 4, value));
  return out;
}

/** HMAC-SHA-256 of `message` under `key` (both Uint8Array). */
export function hmacSha256(key, message) {
  const block = key.length > 64 ? sha256(key) : key;
  const padded = new Uint8Array(64);
  padded.set(block);
  const inner = new Uint8Array(64 + message.length);
  const outer = new Uint8Array(64 + 32);
  for (let i = 0; i < 64; i++) {
    inner[i] = padded[i] ^ 0x36;
    outer[i] = padded[i] ^ 0x5c;
  }
  inner.set(message, 64);
  outer.set(sha256(inner), 64);
  return sha256(outer);
}

const utf8 = (text) => new TextEncoder().encode(text);
const base64 = (bytes) => btoa(String.fromCharCode(...bytes));

/** The `Authorization` header for `method` on `url`, signed with `credentials`. */
export function hawkHeader(credentials, method, url) {
  const target = new URL(url, location.href);
  const ts = Math.floor(Date.now() / 1000);
  const nonce = Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(36)).join('').slice(0, 12);
  const port = target.port || (target.protocol === 'https:' ? '443' : '80');
  const resource = target.pathname + target.search;
  const normalized = ['hawk.1.header', ts, nonce, method.toUpperCase(), resource, target.hostname.toLowerCase(), port, '', '']
    .join('\n') + '\n';
  const mac = base64(hmacSha256(utf8(credentials.accessToken), utf8(normalized)));
  return `Hawk id="${credentials.clientId}", ts="${ts}", nonce="${nonce}", mac="${mac}"`;
}

/** `url` signed for a GET with a `bewit` (Hawk's signed URL, as Taskcluster's clients make
 * them) that lasts `seconds`: a link that opens without headers, such as a private artifact. */
export function signedUrl(credentials, url, seconds) {
  const target = new URL(url, location.href);
  const exp = Math.floor(Date.now() / 1000) + seconds;
  const port = target.port || (target.protocol === 'https:' ? '443' : '80');
  const resource = target.pathname + target.search;
  const normalized = ['hawk.1.bewit', exp, '', 'GET', resource, target.hostname.toLowerCase(), port, '', ''].join('\n') + '\n';
  const mac = base64(hmacSha256(utf8(credentials.accessToken), utf8(normalized)));
  const bewit = btoa(`${credentials.clientId}\\${exp}\\${mac}\\`).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  target.searchParams.append('bewit', bewit);
  return target.pathname + target.search;
}
