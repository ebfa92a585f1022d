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

/** The environment's own variables that a word of SECRET_WORD names, and that hold no credential. */
const NOT_SECRET_ENV = new Set(['PWD', 'OLDPWD']);

/** A word (between - _ . and case changes) that names a credential: TOKEN, KEY, SECRET, PASSWORD… */
const SECRET_WORD = /^(auth|authorization|token|key|apikey|secret|cookie|password|passwd|pwd|credentials?|signature|sig)$/i;

/** Whether a name holds a word that names a credential (HF_TOKEN, --api-key, AWS_SECRET_ACCESS_KEY, accessToken; not --tokenizer, KEYBOARD). */
function secretWord(name: string): boolean {
  return name
    .replace(/^-+/, '')
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .split(/[-_.]+/)
    .some((w) => SECRET_WORD.test(w));
}

/** Shorter values are not masked in quoted text: "1", "true", a short word would read *** wherever they appear. */
const MIN_SECRET_CHARS = 6;

/**
 * The credentials a device was given — the values of environment variables named like credentials
 * (its own and the server's, which its processes inherit), of credential-named flags in its
 * arguments, of credential-named headers (a scheme such as `Bearer` left out) and URL query
 * parameters — for {@link maskSecrets}.
 */
export function secretValues(given: { args?: readonly string[]; env?: Readonly<Record<string, string | undefined>>; headers?: Readonly<Record<string, string>>; url?: string }): string[] {
  const found = new Set<string>();
  // (Named by a word of their own — HF_TOKEN, --api-key — not within one: PWD read as a password
  // and --tokenizer as a token, and the working directory and a model's name read *** in every traceback.)
  for (const [name, value] of Object.entries(given.env ?? {})) if (value !== undefined && secretWord(name) && !NOT_SECRET_ENV.has(name)) found.add(value);
  const args = given.args ?? [];
  args.forEach((a, i) => {
    const eq = /^(--?[^=]+)=(.*)$/s.exec(a);
    if (eq) {
      if (secretWord(eq[1] as string)) found.add(eq[2] as string);
      return;
    }
    const before = args[i - 1];
    if (before !== undefined && /^--?[^=]+$/.test(before) && secretWord(before) && !a.startsWith('-')) found.add(a);
  });
  for (const [name, value] of Object.entries(given.headers ?? {})) if (secretWord(name)) for (const v of withSchemeToken(value)) found.add(v);
  if (given.url) {
    try {
      const u = new URL(given.url);
      for (const [name, value] of u.searchParams) if (secretWord(name)) found.add(value);
    } catch {
      // (not a URL: nothing in it to find)
    }
  }
  // Longest first: a value that holds another is masked whole.
  return [...found].filter((v) => v.length >= MIN_SECRET_CHARS).sort((a, b) => b.length - a.length);
}

/** A credential header's value, and its token alone where a scheme leads it (`Bearer tok` → also `tok`). */
export function withSchemeToken(value: string): string[] {
  const token = /^\S+\s+(\S+)$/.exec(value)?.[1];
  return token ? [value, token] : [value];
}

/**
 * Text quoted from what a device said — a process's stderr, an endpoint's error page — with each
 * of `secrets` in it read `***`: a process that printed its argv or environment put its API key
 * into job errors and logs (a container deployer's trial).
 */
export function maskSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join('***');
  return out;
}
