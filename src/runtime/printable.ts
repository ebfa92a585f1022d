/**
 * Text quoted from outside (an endpoint's body, a process's stderr) as part of one log line: its
 * backslashes doubled and its control characters escaped (\n, \t, \r, else \xNN or \uNNNN: C0,
 * DEL, C1, and the line and paragraph separators). A NUL made a whole log a "binary file" to
 * grep, a newline split a line, and a terminal's escape sequence acted on the terminal.
 */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what it finds
  return text.replace(/[\\\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => {
    if (c === '\\') return '\\\\';
    if (c === '\n') return '\\n';
    if (c === '\t') return '\\t';
    if (c === '\r') return '\\r';
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`;
  });
}
