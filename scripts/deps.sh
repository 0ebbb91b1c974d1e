#!/usr/bin/env bash
# Installs what building, running and testing Istota needs on Debian 12: Debian packages
# (when missing), the npm tooling in nextcloud-app/ (the Claude Code CLI, the front-end
# toolchain) and the Go modules. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  bubblewrap          # the per-task sandbox
  libc6-dev           # libc.a: istota (cgo) and its sandbox init istota-init (C) link static
  php-cli php-xml php-mbstring php-sqlite3 php-curl
  phpunit             # PHP tests (Debian's 9.6, no Composer)
  php-symfony-console php-psr-log php-psr-container
  libxml2-utils       # xmllint, validates appinfo/info.xml
  strace              # the sandbox tests prove ptrace is denied
  curl perl           # probes the sandbox and proxy tests run inside
  sqlite3
  postgresql          # the multi-host tests start a real PostgreSQL server (initdb, postgres)
  libsqlite3-dev      # sqlite3.h for the sqlite-vec extension compiled into the sidecar
  chromium            # the browse skill renders pages with it; the settings pages' browser tests drive it
  poppler-utils       # pdftotext: the invoice tests read the PDFs back; pdftoppm for scans
  tesseract-ocr tesseract-ocr-eng   # OCR of photos and scans: the ocr skill, and agents in their sandbox
  beancount           # bean-check: the invoice tests check the ledger postings
  # packaging (make appstore / test-appstore): static arm64 cross build, binary checks,
  # signing, signature.json checked with the phpseclib Nextcloud uses, proxy snippets
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross file openssl php-phpseclib
  qemu-user-static    # runs the arm64 binaries in test-appstore (user-mode emulation)
  nginx-light apache2-bin
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Agents never run as root: when we are root, they run as this unprivileged account.
if [ "$(id -u)" -eq 0 ] && ! id -u istota-agent >/dev/null 2>&1; then
  echo "deps: creating the unprivileged user istota-agent"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin istota-agent
fi

if [ ! -x nextcloud-app/node_modules/.bin/claude ] || [ nextcloud-app/package-lock.json -nt nextcloud-app/node_modules/.package-lock.json ]; then
  # `npm install` with the lock file, not `npm ci`: the registry this project builds
  # from carries only the Linux builds of rollup's per-platform packages, so the lock
  # lists only those and `npm ci` (which wants every optional platform listed) refuses.
  # With the lock present, `npm install` installs exactly the locked versions.
  echo "deps: npm install (nextcloud-app, locked versions)"
  (cd nextcloud-app && npm install --no-audit --no-fund --loglevel=error)
fi

go mod download
