import { describe, expect, it } from 'vitest';
import { maskSecrets, redactArgs, redactUrl, secretValues } from '../../src/runtime/redact.js';

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

describe('secretValues and maskSecrets', () => {
  it('take the values a word of their name calls a credential, and mask them in quoted text — not the working directory (PWD) nor a --tokenizer', () => {
    const secrets = secretValues({
      env: { PWD: '/home/alice/embedder', OLDPWD: '/home/alice', HF_TOKEN: 'hf_s3cret', KEYBOARD: 'us-intl-layout', accessToken: 'tok-s3cret', MY_KEY: 'k1' },
      args: ['--tokenizer', 'meta-llama/Llama-2-7b-hf', '--api-key=sk-s3cret', '--token', 'tk-s3cret'],
      headers: { Authorization: 'Bearer ab-s3cret', Accept: 'application/json' },
      url: 'http://h/x?api_key=q-s3cret&model=m-1234567',
    });
    expect([...secrets].sort()).toEqual(['Bearer ab-s3cret', 'ab-s3cret', 'hf_s3cret', 'q-s3cret', 'sk-s3cret', 'tk-s3cret', 'tok-s3cret'].sort());
    expect(maskSecrets('File "/home/alice/embedder/worker.py": tokenizer meta-llama/Llama-2-7b-hf, key sk-s3cret, header Bearer ab-s3cret, k1', secrets)).toBe('File "/home/alice/embedder/worker.py": tokenizer meta-llama/Llama-2-7b-hf, key ***, header ***, k1');
  });
});
