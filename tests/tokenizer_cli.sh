#!/usr/bin/env bash
# `hp tokenizer train|encode|decode|info` as CTest's tokenizer_cli runs it:
#
#   tests/tokenizer_cli.sh HP SOURCE_DIR
#
# encode with GPT-2's files gives the reference ids (tests/data/gpt2/mixed.ids, from tiktoken) and
# decode gives the text back; --threads gives the same ids; train writes a tokenizer.json that
# encodes and decodes arbitrary bytes losslessly, with a progress report on stderr; bad input
# (a WordPiece tokenizer.json, a missing corpus, a bad --vocab, an id outside the vocabulary) exits
# non-zero with a message naming the file or value.
set -euo pipefail
hp="$1" src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-tokenizer-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "tokenizer_cli: $*" >&2; exit 1; }
gpt2="$src/tests/data/gpt2"

"$hp" tokenizer encode --tokenizer "$gpt2" "$gpt2/mixed.txt" > mixed.ids
cmp -s mixed.ids "$gpt2/mixed.ids" || fail "encode of mixed.txt differs from the reference ids"
"$hp" tokenizer encode --tokenizer "$gpt2/encoder.json" --threads 3 < "$gpt2/mixed.txt" > mixed3.ids
cmp -s mixed3.ids "$gpt2/mixed.ids" || fail "encode --threads 3 from stdin differs from the reference ids"
"$hp" tokenizer decode --tokenizer "$gpt2" mixed.ids > mixed.txt
cmp -s mixed.txt "$gpt2/mixed.txt" || fail "decode of the ids is not the text"
[[ "$("$hp" tokenizer encode --tokenizer "$gpt2" --count "$gpt2/mixed.txt")" == "$(wc -l < "$gpt2/mixed.ids")" ]] ||
    fail "--count is not the number of ids"
"$hp" tokenizer info "$gpt2" | grep -q "vocabulary 50257, 50000 merges" || fail "info of GPT-2"

# Train on a corpus of two files (text, then random bytes), with the progress report.
: > a.txt
for i in 1 2 3 4 5 6 7 8; do cat "$gpt2/mixed.txt"; done >> a.txt
head -c 50000 /dev/urandom > b.bin
"$hp" tokenizer train a.txt b.bin --vocab 600 -o tok.json 2> train.log || { cat train.log; fail "train failed"; }
grep -q "learning merges" train.log || { cat train.log; fail "no progress report on stderr"; }
grep -q "wrote tok.json: vocabulary 600" train.log || { cat train.log; fail "train did not report the vocabulary"; }
"$hp" tokenizer info tok.json | grep -q "special 599: <|endoftext|>" || fail "the trained tokenizer lacks <|endoftext|> at 599"
for f in a.txt b.bin; do
    "$hp" tokenizer encode --tokenizer tok.json "$f" > ids
    "$hp" tokenizer decode --tokenizer tok.json ids > back
    cmp -s back "$f" || fail "round trip of $f through the trained tokenizer"
    awk '$1 < 0 || $1 >= 600 { exit 1 }' ids || fail "an id outside [0, 600) for $f"
done
# A trained tokenizer needs fewer tokens than 2/3 of the bytes of its own text.
(( $("$hp" tokenizer encode --tokenizer tok.json --count a.txt) < $(wc -c < a.txt) * 2 / 3 )) ||
    fail "the trained tokenizer does not shorten its text to 2/3"

# Bad input.
expect_fail() { # expect_fail NEEDLE CMD...: CMD exits non-zero and its stderr holds NEEDLE
    local needle="$1"; shift
    if "$@" > out 2> err; then fail "'$*' succeeded"; fi
    grep -qF -- "$needle" err || { cat err; fail "'$*': the message lacks '$needle'"; }
}
printf '{"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}}, "pre_tokenizer": null}\n' > wp.json
expect_fail 'wp.json: model.type "WordPiece"' "$hp" tokenizer encode --tokenizer wp.json a.txt
printf '{"model": {"type": "BPE", "vocab": {' > cut.json
expect_fail 'cut.json: not valid JSON' "$hp" tokenizer info cut.json
expect_fail 'no-such.txt' "$hp" tokenizer train no-such.txt --vocab 300 -o x.json
expect_fail '--vocab' "$hp" tokenizer train a.txt --vocab 12 -o x.json
echo "1 2 700" > bad.ids
expect_fail 'id 700 at position 2' "$hp" tokenizer decode --tokenizer tok.json bad.ids
expect_fail 'needs --tokenizer' "$hp" tokenizer encode a.txt
echo "tokenizer_cli: ok"
