import { describe, expect, it } from 'vitest';
import { redactArgs, redactUrl } from '../../src/runtime/redact.js';

describe('redactUrl', () => {
  it('hides a password and credential-named query values, and nothing else', () => {
    expect(redactUrl('redis://:s3cret@127.0.0.1:6379/0')).toBe('redis://:***@127.0.0.1:6379/0');
    expect(redactUrl('rediss://user:s3cret@h:6380')).toBe('rediss://user:***@h:6380');
    expect(redactUrl('https://h/v1/infer?model=m&api_key=k&Token=t&n=2')).toBe('https://h/v1/infer?model=m&api_key=***&Token=***&n=2');
    // Unchanged, byte for byte, where there is nothing to hide (no normalising of the URL).
    expect(redactUrl('redis://127.0.0.1:6379')).toBe('redis://127.0.0.1:6379');
    expect(redactUrl('redis://user@h:6379')).toBe('redis://user@h:6379');
    // An HTTP URL's user name alone may be the credential (https://TOKEN@host).
    expect(redactUrl('http://user@h:8080/a?model=m')).toBe('http://***@h:8080/a?model=m');
    expect(redactUrl('none')).toBe('none');
  });

  it('hides the value of a credential-named flag, = or the argument after, and nothing else', () => {
    expect(redactArgs(['serve.py', '--api-key=s3cret', '--token', 't0k', '--model', 'llama', '-v', '--hf-token', '--fp16'])).toEqual(['serve.py', '--api-key=***', '--token', '***', '--model', 'llama', '-v', '--hf-token', '--fp16']);
    expect(redactArgs(['device.py'])).toEqual(['device.py']);
  });
});
