#!/usr/bin/env bash
# Builds the app-store release tarball build/appstore/istota-<version>.tar.gz: one folder
# istota/ holding what Nextcloud reads at run time (appinfo lib templates img js, and l10n
# when present) plus the static sidecar binaries bin/amd64/istota and bin/arm64/istota and,
# beside each, the sandbox init istota-init, and nothing else. The version comes from
# appinfo/info.xml.
#
#   scripts/appstore.sh [--sign-key app.key --sign-cert app.crt] [--out DIR] [--app-root DIR]
#
# With a key and certificate (also SIGN_KEY / SIGN_CERT in the environment) it also writes
# appinfo/signature.json inside the tarball, in the format Nextcloud's integrity checker
# verifies, and istota-<version>.tar.gz.sig, the base64 RSA-SHA512 signature of the tarball
# the app store's upload form asks for.
#
# The cross-compiled binaries are cached in build/appstore/cache and rebuilt only when the
# Go sources, go.mod/go.sum, the version or the toolchain change. --app-root takes the PHP
# and front-end folders from another tree (tests use it); the binaries always come from
# this repository.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
app_root=$repo
out=$repo/build/appstore
sign_key=${SIGN_KEY:-}
sign_cert=${SIGN_CERT:-}

die() {
	echo "appstore: $*" >&2
	exit 1
}

while (($#)); do
	case $1 in
	--sign-key) sign_key=${2:?--sign-key needs a file}; shift 2 ;;
	--sign-cert) sign_cert=${2:?--sign-cert needs a file}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--app-root) app_root=$(cd "${2:?--app-root needs a directory}" && pwd); shift 2 ;;
	-h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
if [ -n "$sign_key" ] || [ -n "$sign_cert" ]; then
	if [ -z "$sign_key" ] || [ -z "$sign_cert" ]; then die "signing needs both a key and a certificate (SIGN_KEY and SIGN_CERT)"; fi
	[ -r "$sign_key" ] || die "signing key $sign_key is not readable"
	[ -r "$sign_cert" ] || die "certificate $sign_cert is not readable"
	sign_key=$(realpath "$sign_key")
	sign_cert=$(realpath "$sign_cert")
fi

for tool in xmllint go gcc aarch64-linux-gnu-gcc file tar gzip sha256sum; do
	command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
done
if [ -n "$sign_key" ]; then
	for tool in openssl php; do
		command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
	done
fi

# What the tarball holds besides bin/. Nextcloud reads these from the app folder.
required=(appinfo lib templates img js)
optional=(l10n)
for d in "${required[@]}"; do
	[ -d "$app_root/$d" ] || die "required folder $d/ is missing in $app_root$([ "$d" = js ] && echo ' (build it with `make js`)')"
	[ -n "$(find "$app_root/$d" -type f ! -name '.*' -print -quit)" ] || die "required folder $d/ in $app_root holds no files$([ "$d" = js ] && echo ' (build it with `make js`)')"
done

version=$(xmllint --xpath 'string(/info/version)' "$app_root/appinfo/info.xml") || die "cannot read the version from appinfo/info.xml"
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || die "appinfo/info.xml has no usable <version> (got \"$version\")"
app_id=$(xmllint --xpath 'string(/info/id)' "$app_root/appinfo/info.xml")
[ "$app_id" = istota ] || die "appinfo/info.xml names the app \"$app_id\", want istota"

# --- static sidecar binaries -------------------------------------------------------------
cache=$repo/build/appstore/cache
mkdir -p "$cache"
tags='sqlite_fts5 sqlite_omit_load_extension osusergo netgo'
# istota-init (every sandbox's pid 1) is a small C program, built static by the same C
# compiler as istota's cgo; its flags live in sidecar/cmd/istota-init/build.sh, which the
# tests (sidecar/internal/sandbox/sandboxtest) build it with too.
init_build=sidecar/cmd/istota-init/build.sh

# The cache key covers everything the binaries are made of: the Go and C sources (and
# embedded files) of the sidecar, the init's build script, the module graph, the version
# stamped in, the build flags and the compilers.
source_key() {
	local arch=$1 cc=$2
	{
		echo "version=$version tags=$tags arch=$arch"
		go version
		"$cc" --version | head -n1
		(cd "$repo" && find sidecar go.mod go.sum -type f ! -name '*_test.go' ! -path '*/testdata/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
	} | sha256sum | cut -d' ' -f1
}

# Both binaries of one architecture are built together under one key: they ship together
# and must come from the same sources (the init refuses another protocol version).
build_binary() {
	local arch=$1 cc=$2 machine=$3
	local bin=$cache/$arch/istota init=$cache/$arch/istota-init stamp=$cache/$arch/istota.key key
	key=$(source_key "$arch" "$cc")
	if [ -x "$bin" ] && [ -x "$init" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
		echo "appstore: bin/$arch/istota and bin/$arch/istota-init are up to date"
	else
		echo "appstore: building bin/$arch/istota (static, $cc) and bin/$arch/istota-init (static C, $cc)"
		mkdir -p "$cache/$arch"
		rm -f "$stamp"
		# GOFLAGS from the Makefile or the user's go env must not add tags or change modes.
		(cd "$repo" && GOFLAGS='' CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=$cc \
			go build -buildvcs=false -tags "$tags" -trimpath \
			-ldflags "-s -w -X github.com/istota/istota/sidecar/internal/app.Version=$version -linkmode external -extldflags -static" \
			-o "$bin.tmp" ./sidecar/cmd/istota) || die "building bin/$arch/istota failed"
		(cd "$repo" && "$init_build" "$cc" "$init.tmp") || die "building bin/$arch/istota-init failed"
		mv "$bin.tmp" "$bin"
		mv "$init.tmp" "$init"
		echo "$key" >"$stamp"
	fi
	local desc f
	for f in "$bin" "$init"; do
		desc=$(file -b "$f")
		[[ $desc == *"statically linked"* ]] || die "bin/$arch/$(basename "$f") is not statically linked: $desc"
		[[ $desc == *"$machine"* ]] || die "bin/$arch/$(basename "$f") is not a $machine binary: $desc"
	done
}

build_binary amd64 gcc x86-64
build_binary arm64 aarch64-linux-gnu-gcc "ARM aarch64"
if [ "$(uname -m)" = x86_64 ]; then
	got=$("$cache/amd64/istota" version) || die "bin/amd64/istota does not run"
	[ "$got" = "istota $version" ] || die "bin/amd64/istota reports \"$got\", want \"istota $version\""
	# Outside a sandbox the init runs a command as a plain parent and returns its status.
	got=$("$cache/amd64/istota-init" -- /bin/echo init-ok) || die "bin/amd64/istota-init does not run"
	[ "$got" = init-ok ] || die "bin/amd64/istota-init ran /bin/echo init-ok and printed \"$got\""
fi

# --- stage the app folder ----------------------------------------------------------------
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/istota/bin/amd64" "$stage/istota/bin/arm64"
for d in "${required[@]}" "${optional[@]}"; do
	[ -d "$app_root/$d" ] || continue
	# Dotfiles (.gitkeep, editor state), backups and source maps (they embed the front-end
	# sources) stay out.
	(cd "$app_root" && find "$d" \( -name '.*' -o -name '*~' -o -name '*.map' \) -prune -o \( -type f -o -type l \) -print0 |
		tar --null --files-from=- --create --file=- --dereference) | tar --extract --file=- --directory="$stage/istota"
done
install -m 0755 "$cache/amd64/istota" "$stage/istota/bin/amd64/istota"
install -m 0755 "$cache/arm64/istota" "$stage/istota/bin/arm64/istota"
install -m 0755 "$cache/amd64/istota-init" "$stage/istota/bin/amd64/istota-init"
install -m 0755 "$cache/arm64/istota-init" "$stage/istota/bin/arm64/istota-init"
# The stage must hold exactly what Nextcloud will find after the install, and nothing odd.
if [ -n "$(find "$stage/istota" ! -type f ! -type d -print -quit)" ]; then
	die "the staged app holds something other than files and folders: $(find "$stage/istota" ! -type f ! -type d | head -n3)"
fi

# --- appinfo/signature.json (Nextcloud code signing) -------------------------------------
# Nextcloud's IntegrityCheck\Checker verifies: "hashes" = SHA-512 of every file of the app
# folder (relative paths, sorted, appinfo/signature.json itself left out), "signature" =
# base64 RSA-PSS signature of PHP's json_encode() of those hashes (message digest SHA-1,
# phpseclib's default, MGF1 with SHA-512, salt length 0), "certificate" = the PEM
# certificate as phpseclib writes it. The certificate must be one the Nextcloud code signing
# authority issued for CN=istota for a server to accept it.
if [ -n "$sign_key" ]; then
	hashes_json=$out/hashes.json
	php -n -r '
		$root = $argv[1];
		// Names the checker never hashes (it skips them on the server side too).
		$skip = [".DS_Store", ".directory", ".rnd", ".webapp", "Thumbs.db", "nextcloud-init-sync.lock"];
		$hashes = [];
		$it = new RecursiveIteratorIterator(new RecursiveDirectoryIterator($root, FilesystemIterator::SKIP_DOTS));
		foreach ($it as $path => $info) {
			if (!$info->isFile() || in_array($info->getFilename(), $skip, true)) {
				continue;
			}
			$rel = ltrim(substr($path, strlen($root)), "/");
			if ($rel === "appinfo/signature.json") {
				continue;
			}
			$hashes[$rel] = hash_file("sha512", $path);
		}
		ksort($hashes);
		file_put_contents($argv[2], json_encode($hashes));
	' "$stage/istota" "$hashes_json" || die "hashing the app files failed"
	signature=$(openssl dgst -sha1 -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:0 -sigopt rsa_mgf1_md:sha512 \
		-sign "$sign_key" "$hashes_json" | base64 -w0) || die "signing the file hashes with $sign_key failed"
	cert_der=$(openssl x509 -in "$sign_cert" -outform DER | base64 -w0) || die "$sign_cert is not a PEM certificate"
	# The private key must belong to the certificate, or every server would refuse the app.
	[ "$(openssl x509 -in "$sign_cert" -noout -pubkey | openssl pkey -pubin -outform DER | sha256sum)" = \
		"$(openssl pkey -in "$sign_key" -pubout -outform DER | sha256sum)" ] || die "the signing key does not match the certificate $sign_cert"
	php -n -r '
		$hashes = json_decode(file_get_contents($argv[1]), true);
		$pem = "-----BEGIN CERTIFICATE-----\r\n" . chunk_split($argv[3], 64) . "-----END CERTIFICATE-----";
		$data = ["hashes" => $hashes, "signature" => $argv[2], "certificate" => $pem];
		file_put_contents($argv[4], json_encode($data, JSON_PRETTY_PRINT));
	' "$hashes_json" "$signature" "$cert_der" "$stage/istota/appinfo/signature.json" || die "writing appinfo/signature.json failed"
	rm -f "$hashes_json"
fi

# --- the tarball -------------------------------------------------------------------------
tarball=$out/istota-$version.tar.gz
# Fixed owner, modes, order and times: the same inputs give the same tarball.
mtime=$(cd "$repo" && git log -1 --format=%ct 2>/dev/null || echo 0)
(cd "$stage" && tar --create --file=- --sort=name --owner=0 --group=0 --numeric-owner \
	--mtime="@$mtime" --mode='u+rwX,go+rX,go-w' istota) | gzip -9 -n >"$tarball.tmp"
mv "$tarball.tmp" "$tarball"
rm -f "$tarball.sig"
if [ -n "$sign_key" ]; then
	openssl dgst -sha512 -sign "$sign_key" "$tarball" | base64 -w0 >"$tarball.sig" || die "signing $tarball failed"
	echo >>"$tarball.sig"
fi
rm -rf "$stage"

echo "appstore: wrote $tarball ($(du -h "$tarball" | cut -f1))"
[ -z "$sign_key" ] || echo "appstore: wrote $tarball.sig and appinfo/signature.json"
