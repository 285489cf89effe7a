# Sourced by .ci/run: Debian's Chromium for the dashboard's browser test (Playwright drives it through
# its executable path; Playwright never downloads a browser here). Without root the test skips.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing chromium (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "== chromium not available: the dashboard browser test will be skipped"
  fi
fi
