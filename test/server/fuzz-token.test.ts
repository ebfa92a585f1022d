/** The fuzz suite (fuzz-suite.ts) against a server with server.token set: every seventh request goes without it. */
import { defineFuzz } from './fuzz-suite.js';

defineFuzz('fuzz-token-5f0c2a9e7b1d4c36');
