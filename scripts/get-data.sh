#!/usr/bin/env bash
# Produces data/kjv.txt, the default training corpus: the King James Bible (public domain) from
# Debian's `bible-kjv` package (`apt-get install bible-kjv`), as clean UTF-8 (in fact ASCII) text.
#
# `bible -l100000 'Gen1:1-Rev22:21'` prints each chapter as a heading line "Genesis 1" (after a
# blank line) followed by verses "  1 In the beginning ...", one per line. We strip the verse
# numbers and write:
#
#     Genesis                 <- book name, when a new book starts
#                             <- blank line
#     Chapter 1               <- chapter heading
#     In the beginning ...    <- one verse per line, no reference
#
# Idempotent: does nothing if data/kjv.txt exists and is non-empty. Run from anywhere; the file
# lands in <repo>/data/ (override with HP_DATA_DIR).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${HP_DATA_DIR:-$root/data}"
out="$dir/kjv.txt"

if [[ -s "$out" ]]; then
    echo "get-data: $out already exists ($(wc -c < "$out") bytes); nothing to do"
    exit 0
fi
if ! command -v bible > /dev/null 2>&1; then
    echo "get-data: the 'bible' command is missing; install Debian's bible-kjv package" >&2
    exit 1
fi

mkdir -p "$dir"
tmp="$(mktemp "$dir/.kjv.XXXXXX")"
trap 'rm -f "$tmp"' EXIT

bible -l100000 'Gen1:1-Rev22:21' | awk '
    /^  *[0-9]+ / {                       # a verse: "  12 text" -> "text"
        sub(/^ *[0-9]+ /, "")
        print
        next
    }
    /^$/ { next }                         # blank separators: we write our own
    {                                     # a chapter heading: "<book name> <chapter>"
        chapter = $NF
        book = $0
        sub(/ +[0-9]+$/, "", book)
        if (book != prev) {
            if (prev != "") printf "\n"
            printf "%s\n", book
            prev = book
        }
        printf "\nChapter %s\n", chapter
    }
' > "$tmp"

verses="$(grep -c -v -e '^$' -e '^Chapter [0-9]*$' "$tmp" || true)"
if [[ ! -s "$tmp" || "$verses" -lt 31000 ]]; then
    echo "get-data: unexpected output from bible ($verses lines); not writing $out" >&2
    exit 1
fi
mv "$tmp" "$out"
trap - EXIT
echo "get-data: wrote $out ($(wc -c < "$out") bytes)"
