// The node peers of bench/bench_tokenizer.c: encodes a text with GPT-2's vocabulary, one untimed
// warm-up encode, then the fastest of REPS timed encodes; prints one JSON line like the C bench's.
//
//   node scripts/tokenizer-ref/bench_peer.js js-tiktoken|tiktoken TEXT [REPS]
//
// js-tiktoken: the pure JavaScript port of tiktoken; tiktoken: OpenAI's Rust encoder compiled to
// WebAssembly (encode_ordinary). Both run on node's main thread (single-threaded).
'use strict';
const fs = require('fs');

const impl = process.argv[2], path = process.argv[3], reps = parseInt(process.argv[4] || '3', 10);
const bytes = fs.readFileSync(path);
const text = bytes.toString('utf8');
let encode;
if (impl === 'js-tiktoken') {
    const enc = require('js-tiktoken').getEncoding('gpt2');
    encode = s => enc.encode(s);
} else if (impl === 'tiktoken') {
    const enc = require('tiktoken').get_encoding('gpt2');
    encode = s => enc.encode_ordinary(s);
} else {
    console.error(`bench_peer: unknown implementation '${impl}' (js-tiktoken or tiktoken)`);
    process.exit(2);
}
let best = Infinity, n = 0;
for (let r = -1; r < reps; r++) {
    const t0 = process.hrtime.bigint();
    n = encode(text).length;
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (r >= 0 && dt < best) best = dt;
}
console.log(JSON.stringify({ bench: 'tokenizer', impl, threads: 1, text: path, bytes: bytes.length, tokens: n,
                             seconds: +best.toFixed(6), mb_per_s: +(bytes.length / best / 1e6).toFixed(2) }));
