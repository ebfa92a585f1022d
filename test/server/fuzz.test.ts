/** The fuzz suite (fuzz-suite.ts) against a server without a token. */
import { defineFuzz } from './fuzz-suite.js';

defineFuzz();
