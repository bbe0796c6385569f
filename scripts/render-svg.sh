#!/usr/bin/env bash
# Renders an SVG (hp plot, hp trace-view) to a PNG with headless Chromium, at the SVG's own size,
# to check that a browser draws it as intended (and for the screenshots under docs/).
#
#   scripts/render-svg.sh IN.svg OUT.png [SCALE]
#
# SCALE (default 1) is the device pixel ratio: 2 gives a sharper PNG of twice the size. Needs
# Debian's `chromium` (apt-get install chromium); fails with a message when it is missing.
set -euo pipefail
if (( $# < 2 )); then
    echo "usage: scripts/render-svg.sh IN.svg OUT.png [SCALE]" >&2
    exit 2
fi
in="$1" out="$2" scale="${3:-1}"
browser=""
for b in chromium chromium-browser google-chrome; do
    if command -v "$b" > /dev/null 2>&1; then browser="$b"; break; fi
done
[[ -n "$browser" ]] || { echo "render-svg.sh: no chromium found (apt-get install chromium)" >&2; exit 1; }
[[ -f "$in" ]] || { echo "render-svg.sh: '$in' is not a file" >&2; exit 1; }
# the root element's width and height (px), which hp's SVG writers always set
tag="$(head -c 4096 "$in" | tr '\n' ' ' | grep -o '<svg[^>]*>' | head -n 1 || true)"
w="$(sed -n 's/.* width="\([0-9.]*\)".*/\1/p' <<<"$tag")"
h="$(sed -n 's/.* height="\([0-9.]*\)".*/\1/p' <<<"$tag")"
[[ -n "${w:-}" && -n "${h:-}" ]] || { echo "render-svg.sh: '$in' has no <svg width=.. height=..>" >&2; exit 1; }
w="${w%.*}" h="${h%.*}"
abs="$(cd "$(dirname "$in")" && pwd)/$(basename "$in")"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/render-svg.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# an HTML page holding the SVG at its size with no margin, so the screenshot is exactly the drawing
printf '<!doctype html><html><body style="margin:0;background:white"><img src="file://%s" width="%s" height="%s"></body></html>\n' \
    "$abs" "$w" "$h" > "$tmp/page.html"
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --allow-file-access-from-files \
    --user-data-dir="$tmp/profile" --force-device-scale-factor="$scale" --window-size="$w,$h" \
    --screenshot="$tmp/shot.png" "file://$tmp/page.html" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
[[ -s "$tmp/shot.png" ]] || { cat "$tmp/log" >&2; echo "render-svg.sh: chromium wrote no screenshot" >&2; exit 1; }
mv "$tmp/shot.png" "$out"
echo "render-svg.sh: $out (${w}x${h} px, scale $scale)"
