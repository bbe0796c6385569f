/* GPT-2's pre-tokenization regex, by hand (see bpe_internal.h):
 *
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * Each character is one of four classes: whitespace (Unicode White_Space), letter (\p{L}), number
 * (\p{N}), other. The alternatives are tried in order at each position (leftmost-first, as in
 * Python's `regex` and Rust's `fancy-regex`), which makes the match at a position a function of
 * the classes of the characters from it: a contraction, an optional space and a run of one class,
 * or a whitespace run that leaves its last character to the next token when a non-space follows. */
#include "data/bpe_internal.h"

enum { C_WS, C_L, C_N, C_O };

/* Classes of ASCII bytes. */
static uint8_t ascii_class(uint8_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return C_WS;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_L;
    if (c >= '0' && c <= '9') return C_N;
    return C_O;
}

static int in_ranges(const hp__bpe_range *r, int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid - 1;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static int is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* The class of the character at text[pos]; *clen its length in bytes. */
static inline int class_at(const uint8_t *text, size_t len, size_t pos, size_t *clen) {
    uint8_t c = text[pos];
    if (c < 0x80) {
        *clen = 1;
        return ascii_class(c);
    }
    uint32_t cp;
    size_t k = hp__bpe_utf8_decode(text + pos, len - pos, &cp);
    if (!k) {
        *clen = 1; /* an invalid byte: a character of the class "other" */
        return C_O;
    }
    *clen = k;
    if (is_white_space(cp)) return C_WS;
    if (in_ranges(hp__bpe_letters, hp__bpe_letters_count, cp)) return C_L;
    if (in_ranges(hp__bpe_numbers, hp__bpe_numbers_count, cp)) return C_N;
    return C_O;
}

/* The end of the run of class `cls` starting at pos. */
static size_t run_end(const uint8_t *text, size_t len, size_t pos, int cls) {
    while (pos < len) {
        size_t k;
        if (class_at(text, len, pos, &k) != cls) break;
        pos += k;
    }
    return pos;
}

size_t hp__bpe_pretok_next(const uint8_t *text, size_t len, size_t pos) {
    uint8_t c = text[pos];
    if (c == '\'' && pos + 1 < len) {
        uint8_t d = text[pos + 1];
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return 2;
        if (pos + 2 < len) {
            uint8_t e = text[pos + 2];
            if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return 3;
        }
    }
    size_t k;
    int cls = class_at(text, len, pos, &k);
    if (cls != C_WS) return run_end(text, len, pos + k, cls) - pos;
    if (c == ' ' && pos + 1 < len) {
        size_t k2;
        int next = class_at(text, len, pos + 1, &k2);
        if (next != C_WS) return run_end(text, len, pos + 1 + k2, next) - pos;
    }
    /* A whitespace run: \s+(?!\S) takes it whole when it ends the text or is followed by more
     * whitespace (impossible: the run is maximal), else all but its last character; a run of one
     * character followed by a non-space falls to \s+. */
    size_t end = pos + k, last = pos;
    while (end < len) {
        size_t k2;
        if (class_at(text, len, end, &k2) != C_WS) break;
        last = end;
        end += k2;
    }
    if (end == len || last == pos) return end - pos;
    return last - pos;
}

int hp__bpe_pretok_cut_ok(const uint8_t *text, size_t len, size_t p) {
    if (p < 2 || p >= len || text[p - 1] != '\n') return 0;
    uint8_t a = text[p - 2], b = text[p];
    return a < 0x80 && b < 0x80 && ascii_class(a) != C_WS && ascii_class(b) != C_WS;
}
