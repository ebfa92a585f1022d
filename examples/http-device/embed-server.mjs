/**
 * An "inference server" for the http-device example: POST /embed with JSON
 * `{ tokens: number[][], dim, maxTokens, seed }` answers the vectors as bytes (float32,
 * little-endian, `dim` per row) — the embeddings example's model, behind HTTP, as a model server
 * would serve it. One request at a time per connection; stoker sends one per device worker.
 *
 *   node examples/http-device/embed-server.mjs --port 8100
 */
import { createServer } from 'node:http';
import { embedTokens } from '../embeddings/embed-kind.mjs';

const port = Number(process.argv[process.argv.indexOf('--port') + 1] || 8100);

const server = createServer((req, res) => {
  if (req.method !== 'POST' || req.url !== '/embed') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('POST /embed\n');
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    try {
      const { tokens, dim, maxTokens, seed } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const vectors = embedTokens(tokens, { dim, maxTokens, seed });
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(Buffer.from(vectors.buffer));
    } catch (e) {
      res.writeHead(400, { 'content-type': 'text/plain' }).end(`bad request: ${e.message}\n`);
    }
  });
});
server.listen(port, '127.0.0.1', () => console.log(`embed-server: listening on http://127.0.0.1:${server.address().port}/embed`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
