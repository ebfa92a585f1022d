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
  // (A user name alone may be the credential: https://TOKEN@host.)
  if (u.username !== '' && u.protocol.startsWith('http')) {
    u.username = '***';
    changed = true;
  }
  for (const name of [...u.searchParams.keys()]) {
    if (!SECRET_NAME.test(name)) continue;
    u.searchParams.set(name, '***');
    changed = true;
  }
  return changed ? u.toString() : url;
}

/**
 * A command line's arguments as logs and `config print` show them: the value of a flag named
 * like a credential (`--api-key=…`, or `--token` and the argument after it) reads `***`.
 */
export function redactArgs(args: readonly string[]): string[] {
  const flag = (a: string) => /^--?[^=]+$/.test(a) && SECRET_NAME.test(a);
  return args.map((a, i) => {
    const eq = /^(--?[^=]+)=/.exec(a);
    if (eq && SECRET_NAME.test(eq[1] as string)) return `${eq[1] as string}=***`;
    const before = args[i - 1];
    return before !== undefined && flag(before) && !a.startsWith('-') ? '***' : a;
  });
}
