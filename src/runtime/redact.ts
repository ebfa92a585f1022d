/** Names of request headers, environment variables and URL query parameters whose values are credentials. */
export const SECRET_NAME = /auth|token|key|secret|cookie|password|passwd|pwd|credential|signature|sig$/i;

/**
 * A URL as logs, errors and status answers may show it: a password in it (`redis://:pw@host`)
 * and the values of query parameters named like credentials (`?api_key=…`) read `***`. A string
 * that is not a URL is returned as it is.
 */
export function redactUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  let changed = false;
  if (u.password !== '') {
    u.password = '***';
    changed = true;
  }
  for (const name of [...u.searchParams.keys()]) {
    if (!SECRET_NAME.test(name)) continue;
    u.searchParams.set(name, '***');
    changed = true;
  }
  return changed ? u.toString() : url;
}
