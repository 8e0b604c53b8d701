#!/usr/bin/env bash
# Renders an HTML report in headless Chromium and saves a PNG of the page, to look at a report
# the way a person opens it (fonts, layout, plots). Not part of CI: the structure of the
# reports is checked by the crates' tests; this is for a human (or a reviewer) to look.
#
#   scripts/report-screenshot.sh REPORT.html [OUT.png] [WIDTH] [HEIGHT]
#
# OUT.png defaults to REPORT.png; the window defaults to 1400 x 2000 pixels (the top of the
# page: what a person sees first). Needs `chromium` (Debian: apt-get install chromium).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 REPORT.html [OUT.png] [WIDTH] [HEIGHT]" >&2
  exit 2
fi
report=$(realpath "$1")
out=${2:-${report%.html}.png}
width=${3:-1400}
height=${4:-2000}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "chromium not found: apt-get install chromium" >&2
  exit 1
fi
# A throw-away profile so that the run leaves nothing behind and never reuses a session.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$profile" --window-size="$width,$height" \
  --screenshot="$(realpath -m "$out")" "file://$report" 2>/dev/null
echo "$out"
