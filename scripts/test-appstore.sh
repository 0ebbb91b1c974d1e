#!/usr/bin/env bash
# Tests the release packaging and the deploy files for real:
#  1. builds the app-store tarball (scripts/appstore.sh), unpacks it and checks its
#     allowlist, the static binaries (istota and the sandbox init istota-init) for amd64
#     and arm64 (each run: arm64 under qemu-aarch64-static), and that appinfo/info.xml validates
#     against the app store's schema (../shared/reference/app-info.xsd);
#  2. that a missing required folder stops the build with a clear message;
#  3. a build signed with a throwaway key and certificate: the .sig verifies with
#     `openssl dgst -sha512 -verify`, appinfo/signature.json verifies the way Nextcloud's
#     integrity checker does it (phpseclib 2, the library Nextcloud ships), and a key that
#     does not belong to the certificate is refused;
#  4. deploy/nginx and deploy/apache pass `nginx -t` / `apache2 -t`, and a WebSocket
#     upgrade goes through each of them to a loopback backend on exactly /v1/ws?token=…;
#  5. deploy/istota.service passes `systemd-analyze verify` and keeps the settings bwrap
#     needs.
#
#   scripts/test-appstore.sh [--app-root DIR]   (DIR: take appinfo lib js … from there)
#
# The binaries are cached in build/appstore/cache between runs, so only the first run pays
# for the cross build.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
app_root=$repo
if [ "${1:-}" = --app-root ]; then
	app_root=$(cd "${2:?--app-root needs a directory}" && pwd)
fi
xsd=$repo/../shared/reference/app-info.xsd

passed=0
failed=0
ok() {
	passed=$((passed + 1))
	echo "ok   $*"
}
fail() {
	failed=$((failed + 1))
	echo "FAIL $*"
}
# check NAME CMD...: runs CMD, one ok/FAIL line; CMD's output is shown only when it fails.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		ok "$name"
	else
		fail "$name"
		[ -z "$out" ] || sed 's/^/     /' <<<"$out"
	fi
}

for tool in xmllint openssl php nginx apache2 systemd-analyze tar file qemu-aarch64-static; do
	command -v "$tool" >/dev/null || { echo "test-appstore: $tool is missing: run scripts/deps.sh" >&2; exit 1; }
done
[ -f /usr/share/php/phpseclib/bootstrap.php ] || { echo "test-appstore: phpseclib 2 is missing: run scripts/deps.sh (php-phpseclib)" >&2; exit 1; }
[ -f "$xsd" ] || { echo "test-appstore: the app store schema is missing at $xsd" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

version=$(xmllint --xpath 'string(/info/version)' "$app_root/appinfo/info.xml")
echo "test-appstore: istota $version"

# --- 1. the unsigned tarball -----------------------------------------------------------
"$repo/scripts/appstore.sh" --app-root "$app_root" --out "$tmp/unsigned"
tarball=$tmp/unsigned/istota-$version.tar.gz
check "tarball is named after the version in appinfo/info.xml" test -f "$tarball"
check "no .sig without a signing key" test ! -e "$tarball.sig"

tar -tzvf "$tarball" >"$tmp/listing"
check "every entry belongs to root:root" awk '$2 != "0/0" { bad = 1 } END { exit bad }' "$tmp/listing"
tar -tzf "$tarball" >"$tmp/names"
check "one top folder istota/, no absolute or .. paths" awk '!/^istota\// || /(^|\/)\.\.(\/|$)/ { bad = 1 } END { exit bad }' "$tmp/names"

mkdir "$tmp/u"
tar -xzf "$tarball" -C "$tmp/u"
app=$tmp/u/istota
want_top="appinfo bin img js lib templates"
[ -d "$app_root/l10n" ] && want_top="appinfo bin img js l10n lib templates"
got_top=$(cd "$app" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort | xargs)
check "top-level entries are exactly: $want_top (got: $got_top)" test "$got_top" = "$want_top"
check "only istota/ at the root of the tarball" test "$(find "$tmp/u" -mindepth 1 -maxdepth 1 | wc -l)" -eq 1
got_bin=$(cd "$app/bin" && find . -mindepth 1 | LC_ALL=C sort | xargs)
check "bin/ holds exactly istota and istota-init for amd64 and arm64 (got: $got_bin)" test "$got_bin" = "./amd64 ./amd64/istota ./amd64/istota-init ./arm64 ./arm64/istota ./arm64/istota-init"

forbidden=$(cd "$app" && find . -mindepth 1 \( -name '.*' -o -name node_modules -o -name tests -o -name test -o -name src \
	-o -name '*.map' -o -name '*.vue' -o -name '*.ts' -o -name '*.go' -o -name 'package*.json' -o -name 'composer.*' \
	-o -name 'vite.config.*' -o -name 'phpunit*' -o -name Makefile -o -name '*~' \) -print)
check "no dotfiles, tests, sources, tool configs or source maps (found: ${forbidden:-none})" test -z "$forbidden"
check "only files and folders (no links or devices)" test -z "$(find "$app" ! -type f ! -type d -print -quit)"

# Nothing that Nextcloud reads may be lost: each shipped folder equals its source, less
# the dotfiles and source maps the build leaves out on purpose.
for d in appinfo lib img js templates l10n; do
	[ -d "$app_root/$d" ] || continue
	check "$d/ is shipped complete" diff -r --exclude='.*' --exclude='*.map' --exclude='*~' "$app_root/$d" "$app/$d"
done

for arch in amd64 arm64; do
	case $arch in amd64) machine=x86-64 ;; arm64) machine="ARM aarch64" ;; esac
	for name in istota istota-init; do
		bin=$app/bin/$arch/$name
		desc=$(file -b "$bin")
		check "bin/$arch/$name is a static, stripped $machine executable" bash -c '[[ $1 == *"statically linked"* && $1 == *"$2"* && $1 == *", stripped"* ]]' _ "$desc" "$machine"
		check "bin/$arch/$name is mode 0755" test "$(stat -c %a "$bin")" = 755
	done
	# The init starts once per task; a small static C program (libc only), it is a
	# fraction of the sidecar's size and must stay so.
	check "bin/$arch/istota-init is under 4 MiB ($(stat -c %s "$app/bin/$arch/istota-init") bytes)" test "$(stat -c %s "$app/bin/$arch/istota-init")" -lt $((4 << 20))
done
if [ "$(uname -m)" = x86_64 ]; then
	check "bin/amd64/istota runs and reports version $version" test "$("$app/bin/amd64/istota" version)" = "istota $version"
	check "bin/amd64/istota-init runs a command and returns its status" \
		bash -c 'out=$("$1" -- /bin/sh -c "echo cmd-ran; exit 3"); [ $? = 3 ] && [ "$out" = cmd-ran ]' _ "$app/bin/amd64/istota-init"
	check "bin/amd64/istota-init refuses another protocol version" \
		bash -c 'out=$("$1" --protocol=999 -- /bin/echo cmd-ran 2>&1); [ $? = 2 ] && [[ $out == *"protocol mismatch"* && $out != *cmd-ran* ]]' _ "$app/bin/amd64/istota-init"
	# The arm64 binaries run here under qemu's user-mode emulation; the commands the init
	# starts are the host's own. Slower and not a real arm64 kernel, but it runs every line
	# of their start: arguments, limits, the start of the command, its status.
	arm64=$app/bin/arm64
	check "bin/arm64/istota runs (under qemu-aarch64-static) and reports version $version" \
		test "$(qemu-aarch64-static "$arm64/istota" version)" = "istota $version"
	check "bin/arm64/istota-init (under qemu) runs a command with a limit and returns its status" \
		bash -c 'out=$(qemu-aarch64-static "$1" --rlimit nofile=50 -- /bin/sh -c "ulimit -n; exit 3"); [ $? = 3 ] && [ "$out" = 50 ]' _ "$arm64/istota-init"
	check "bin/arm64/istota-init (under qemu) says why a command cannot start" \
		bash -c 'out=$(qemu-aarch64-static "$1" -- /nonexistent/cmd 2>&1); [ $? = 127 ] && [[ $out == *"/nonexistent/cmd"* ]]' _ "$arm64/istota-init"
	check "bin/arm64/istota-init (under qemu) refuses another protocol version" \
		bash -c 'out=$(qemu-aarch64-static "$1" --protocol=999 -- /bin/echo cmd-ran 2>&1); [ $? = 2 ] && [[ $out == *"protocol mismatch"* && $out != *cmd-ran* ]]' _ "$arm64/istota-init"
fi
check "appinfo/info.xml validates against app-info.xsd" xmllint --noout --schema "$xsd" "$app/appinfo/info.xml"

# --- 2. a missing required folder stops the build clearly ------------------------------
mkdir "$tmp/nojs"
cp -r "$app/appinfo" "$app/lib" "$app/img" "$app/templates" "$tmp/nojs/"
if "$repo/scripts/appstore.sh" --app-root "$tmp/nojs" --out "$tmp/nojs-out" 2>"$tmp/nojs.err"; then
	fail "a build without js/ must fail"
else
	check "a build without js/ fails naming js/ and make js ($(head -c 200 "$tmp/nojs.err"))" grep -q 'js/ is missing.*make js' "$tmp/nojs.err"
fi
check "a failed build writes no tarball" test ! -e "$tmp/nojs-out/istota-$version.tar.gz"

# --- 3. signed build -------------------------------------------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/app.key" -out "$tmp/app.crt" -days 2 -subj /CN=istota 2>/dev/null
"$repo/scripts/appstore.sh" --app-root "$app_root" --out "$tmp/signed" --sign-key "$tmp/app.key" --sign-cert "$tmp/app.crt"
starball=$tmp/signed/istota-$version.tar.gz
openssl x509 -in "$tmp/app.crt" -noout -pubkey >"$tmp/app.pub"
base64 -d "$starball.sig" >"$tmp/tarball.sig.bin"
check ".sig verifies with openssl dgst -sha512 -verify" openssl dgst -sha512 -verify "$tmp/app.pub" -signature "$tmp/tarball.sig.bin" "$starball"
cp "$starball" "$tmp/tampered.tar.gz"
printf 'x' >>"$tmp/tampered.tar.gz"
if openssl dgst -sha512 -verify "$tmp/app.pub" -signature "$tmp/tarball.sig.bin" "$tmp/tampered.tar.gz" >/dev/null 2>&1; then
	fail ".sig must not verify a changed tarball"
else
	ok ".sig does not verify a changed tarball"
fi

mkdir "$tmp/s"
tar -xzf "$starball" -C "$tmp/s"
check "signed tarball holds appinfo/signature.json" test -f "$tmp/s/istota/appinfo/signature.json"
# What OC\IntegrityCheck\Checker::verify does for an app, minus the root CA check (the
# throwaway certificate is self-signed): CN, RSA-PSS over json_encode(hashes) with MGF1
# SHA-512 and salt length 0, then the hashes against the files on disk.
cat >"$tmp/verify-signature.php" <<'PHP'
<?php
require '/usr/share/php/phpseclib/bootstrap.php';
spl_autoload_register(static function (string $class): void {
	$file = '/usr/share/php/' . str_replace('\\', '/', $class) . '.php';
	if (str_starts_with($class, 'phpseclib\\') && is_file($file)) {
		require $file;
	}
});
[, $appDir, $tamper] = $argv;
$data = json_decode(file_get_contents("$appDir/appinfo/signature.json"), true);
if (!is_array($data) || !isset($data['hashes'], $data['signature'], $data['certificate'])) {
	fwrite(STDERR, "signature.json lacks hashes, signature or certificate\n");
	exit(1);
}
$hashes = $data['hashes'];
if ($tamper === '1') {
	$hashes['lib/AppInfo/Application.php'] = hash('sha512', 'something else');
}
ksort($hashes);
$x509 = new \phpseclib\File\X509();
if ($x509->loadX509($data['certificate']) === false) {
	fwrite(STDERR, "certificate does not parse\n");
	exit(1);
}
if (($x509->getDN(\phpseclib\File\X509::DN_OPENSSL)['CN'] ?? '') !== 'istota') {
	fwrite(STDERR, "certificate CN is not istota\n");
	exit(1);
}
$rsa = new \phpseclib\Crypt\RSA();
$rsa->loadKey($x509->currentCert['tbsCertificate']['subjectPublicKeyInfo']['subjectPublicKey']);
$rsa->setSignatureMode(\phpseclib\Crypt\RSA::SIGNATURE_PSS);
$rsa->setMGFHash('sha512');
$rsa->setSaltLength(0);
if (!$rsa->verify(json_encode($hashes), base64_decode($data['signature']))) {
	fwrite(STDERR, "signature does not verify\n");
	exit(2);
}
$current = [];
$it = new RecursiveIteratorIterator(new RecursiveDirectoryIterator($appDir, FilesystemIterator::SKIP_DOTS));
foreach ($it as $path => $info) {
	$rel = ltrim(substr($path, strlen($appDir)), '/');
	if ($info->isFile() && $rel !== 'appinfo/signature.json') {
		$current[$rel] = hash_file('sha512', $path);
	}
}
ksort($current);
if ($current !== $hashes) {
	fwrite(STDERR, 'files differ from the signed hashes: ' . implode(', ', array_keys(array_merge(array_diff_assoc($current, $hashes), array_diff_assoc($hashes, $current)))) . "\n");
	exit(3);
}
echo count($hashes), " files verified\n";
PHP
check "appinfo/signature.json verifies as Nextcloud's checker does it" php -n "$tmp/verify-signature.php" "$tmp/s/istota" 0
if php -n "$tmp/verify-signature.php" "$tmp/s/istota" 1 2>/dev/null; then
	fail "signature.json must not verify changed hashes"
else
	ok "signature.json does not verify changed hashes"
fi
check "the signed hashes cover all four binaries" php -n -r '$h = json_decode(file_get_contents($argv[1]), true)["hashes"]; exit(isset($h["bin/amd64/istota"], $h["bin/arm64/istota"], $h["bin/amd64/istota-init"], $h["bin/arm64/istota-init"], $h["appinfo/info.xml"]) ? 0 : 1);' "$tmp/s/istota/appinfo/signature.json"
check "apart from signature.json the signed app equals the unsigned one" diff -r --exclude=signature.json "$app" "$tmp/s/istota"

openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tmp/other.key" 2>/dev/null
if "$repo/scripts/appstore.sh" --app-root "$app_root" --out "$tmp/mismatch" --sign-key "$tmp/other.key" --sign-cert "$tmp/app.crt" 2>"$tmp/mismatch.err" >/dev/null; then
	fail "a key that does not match the certificate must be refused"
else
	check "a key that does not match the certificate is refused" grep -q 'does not match the certificate' "$tmp/mismatch.err"
fi

# --- 4. reverse-proxy snippets ---------------------------------------------------------
free_port() {
	php -n -r '$s = stream_socket_server("tcp://127.0.0.1:0"); echo explode(":", stream_socket_get_name($s, false))[1];'
}
wait_port() {
	local port=$1
	for _ in $(seq 1 300); do
		php -n -r 'exit(@fsockopen("127.0.0.1", (int)$argv[1], $e, $s, 1) ? 0 : 1);' "$port" && return 0
		sleep 0.1
	done
	return 1
}

# A loopback WebSocket backend standing in for the sidecar: records the request line,
# answers the upgrade (RFC 6455 accept key), sends "hello", echoes one client frame.
cat >"$tmp/ws-backend.php" <<'PHP'
<?php
[, $portFile, $logFile] = $argv;
$server = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
if ($server === false) {
	fwrite(STDERR, "listen: $errstr\n");
	exit(1);
}
file_put_contents($portFile, explode(':', stream_socket_get_name($server, false))[1]);
function frame(string $payload): string {
	return "\x81" . chr(strlen($payload)) . $payload;
}
while ($conn = @stream_socket_accept($server, -1)) {
	$head = '';
	while (!str_contains($head, "\r\n\r\n") && ($chunk = fread($conn, 1)) !== false && $chunk !== '') {
		$head .= $chunk;
	}
	$lines = explode("\r\n", trim($head));
	$headers = [];
	foreach (array_slice($lines, 1) as $line) {
		[$k, $v] = array_map('trim', explode(':', $line, 2)) + [1 => ''];
		$headers[strtolower($k)] = $v;
	}
	file_put_contents($logFile, $lines[0] . "\norigin: " . ($headers['origin'] ?? '') . "\n", FILE_APPEND);
	// What RFC 6455 requires of an opening handshake; a proxy that drops any of it fails.
	if (!str_ends_with($lines[0], ' HTTP/1.1') || strtolower($headers['upgrade'] ?? '') !== 'websocket'
		|| !in_array('upgrade', array_map('trim', explode(',', strtolower($headers['connection'] ?? ''))), true)
		|| ($headers['sec-websocket-version'] ?? '') !== '13' || !isset($headers['sec-websocket-key'])) {
		fwrite($conn, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
		fclose($conn);
		continue;
	}
	$accept = base64_encode(sha1($headers['sec-websocket-key'] . '258EAFA5-E914-47DA-95CA-C5AB0DC85B11', true));
	fwrite($conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: $accept\r\n\r\n");
	fwrite($conn, frame('hello'));
	$h = fread($conn, 2);
	$len = ord($h[1]) & 0x7f;
	$mask = fread($conn, 4);
	$data = '';
	while (strlen($data) < $len) {
		$data .= fread($conn, $len - strlen($data));
	}
	$plain = '';
	for ($i = 0; $i < $len; $i++) {
		$plain .= $data[$i] ^ $mask[$i % 4];
	}
	fwrite($conn, frame('echo:' . $plain));
	fclose($conn);
}
PHP

# The browser's side: upgrade through the proxy, receive "hello", send a masked frame,
# receive its echo.
cat >"$tmp/ws-client.php" <<'PHP'
<?php
[, $port, $path] = $argv;
function fail(string $why): never {
	fwrite(STDERR, $why . "\n");
	exit(1);
}
$conn = stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, 10) or fail("connect: $errstr");
stream_set_timeout($conn, 20);
$key = base64_encode(random_bytes(16));
fwrite($conn, "GET $path HTTP/1.1\r\nHost: cloud.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	. "Sec-WebSocket-Key: $key\r\nSec-WebSocket-Version: 13\r\nOrigin: https://cloud.example.test\r\n\r\n");
$head = '';
while (!str_contains($head, "\r\n\r\n") && ($c = fread($conn, 1)) !== false && $c !== '') {
	$head .= $c;
}
if (!str_starts_with($head, 'HTTP/1.1 101')) {
	fail("no upgrade: " . strtok($head, "\r\n"));
}
$want = base64_encode(sha1($key . '258EAFA5-E914-47DA-95CA-C5AB0DC85B11', true));
if (!preg_match('/^Sec-WebSocket-Accept:\s*(\S+)/mi', $head, $m) || $m[1] !== $want) {
	fail("bad Sec-WebSocket-Accept");
}
function readFrame($conn): string {
	$h = fread($conn, 2);
	if (strlen($h) < 2) {
		fail("connection closed");
	}
	$len = ord($h[1]) & 0x7f;
	$data = '';
	while (strlen($data) < $len && !feof($conn)) {
		$data .= fread($conn, $len - strlen($data));
	}
	return $data;
}
if (($got = readFrame($conn)) !== 'hello') {
	fail("first frame: $got");
}
$payload = 'from the browser';
$mask = random_bytes(4);
$masked = '';
for ($i = 0; $i < strlen($payload); $i++) {
	$masked .= $payload[$i] ^ $mask[$i % 4];
}
fwrite($conn, "\x81" . chr(0x80 | strlen($payload)) . $mask . $masked);
if (($got = readFrame($conn)) !== 'echo:from the browser') {
	fail("echo frame: $got");
}
echo "websocket round trip through the proxy\n";
PHP

# ws_through PROXY PORT: the upgrade works, the backend sees exactly /v1/ws?token=…, and a
# path outside /istota-ws/ never reaches it.
ws_through() {
	local name=$1 port=$2
	: >"$tmp/ws.log"
	check "$name: WebSocket upgrade and frames both ways" php -n "$tmp/ws-client.php" "$port" "/istota-ws/?token=v1.abc.def"
	check "$name: the sidecar gets exactly GET /v1/ws?token=…" \
		grep -qx 'GET /v1/ws?token=v1.abc.def HTTP/1.1' "$tmp/ws.log"
	check "$name: the Origin header reaches the sidecar unchanged" grep -qx 'origin: https://cloud.example.test' "$tmp/ws.log"
	: >"$tmp/ws.log"
	php -n "$tmp/ws-client.php" "$port" "/istota-ws/../v1/ping" >/dev/null 2>&1 || true
	php -n "$tmp/ws-client.php" "$port" "/v1/ping" >/dev/null 2>&1 || true
	check "$name: paths outside /istota-ws/ never reach the sidecar" test ! -s "$tmp/ws.log"
}

php -n "$tmp/ws-backend.php" "$tmp/ws.port" "$tmp/ws.log" &
pids+=($!)
for _ in $(seq 1 300); do [ -s "$tmp/ws.port" ] && break; sleep 0.1; done
backend_port=$(cat "$tmp/ws.port")

# nginx: a minimal main config that includes the snippet inside a server block.
nginx_conf() {
	local snippet=$1 port=$2
	cat <<EOF
daemon off;
master_process off;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx-body;
    proxy_temp_path $tmp/nginx-proxy;
    fastcgi_temp_path $tmp/nginx-fastcgi;
    uwsgi_temp_path $tmp/nginx-uwsgi;
    scgi_temp_path $tmp/nginx-scgi;
    server {
        listen 127.0.0.1:$port;
        server_name cloud.example.test;
        include $snippet;
        location ~ \.php(?:\$|/) { return 418; }
        location / { return 404; }
    }
}
EOF
}
nginx_port=$(free_port)
nginx_conf "$repo/deploy/nginx/istota-websocket.conf" "$nginx_port" >"$tmp/nginx-check.conf"
check "nginx -t accepts deploy/nginx/istota-websocket.conf" nginx -t -q -c "$tmp/nginx-check.conf" -p "$tmp"
sed "s/127\.0\.0\.1:8765/127.0.0.1:$backend_port/" "$repo/deploy/nginx/istota-websocket.conf" >"$tmp/nginx-snippet.conf"
check "the nginx snippet targets 127.0.0.1:8765/v1/ws" grep -q 'proxy_pass http://127.0.0.1:8765/v1/ws;' "$repo/deploy/nginx/istota-websocket.conf"
nginx_conf "$tmp/nginx-snippet.conf" "$nginx_port" >"$tmp/nginx.conf"
nginx -c "$tmp/nginx.conf" -p "$tmp" &
pids+=($!)
if wait_port "$nginx_port"; then
	ws_through nginx "$nginx_port"
else
	fail "nginx did not start: $(tail -n3 "$tmp/nginx-error.log" 2>/dev/null)"
fi

# Apache: a minimal server config that includes the snippet.
apache_conf() {
	local snippet=$1 port=$2
	local mods=/usr/lib/apache2/modules
	cat <<EOF
ServerRoot /usr/lib/apache2
LoadModule mpm_event_module $mods/mod_mpm_event.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule proxy_module $mods/mod_proxy.so
LoadModule proxy_http_module $mods/mod_proxy_http.so
ServerName cloud.example.test
Listen 127.0.0.1:$port
PidFile $tmp/apache.pid
DefaultRuntimeDir $tmp
Mutex file:$tmp default
ErrorLog $tmp/apache-error.log
User nobody
Group nogroup
DocumentRoot $tmp/htdocs
<VirtualHost 127.0.0.1:$port>
    ServerName cloud.example.test
    Include $snippet
</VirtualHost>
EOF
}
mkdir -p "$tmp/htdocs"
apache_port=$(free_port)
apache_conf "$repo/deploy/apache/istota-websocket.conf" "$apache_port" >"$tmp/apache-check.conf"
check "apache2 -t accepts deploy/apache/istota-websocket.conf" apache2 -t -f "$tmp/apache-check.conf"
sed "s/127\.0\.0\.1:8765/127.0.0.1:$backend_port/" "$repo/deploy/apache/istota-websocket.conf" >"$tmp/apache-snippet.conf"
check "the Apache snippet targets 127.0.0.1:8765/v1/ws" grep -q 'ProxyPass "http://127.0.0.1:8765/v1/ws"' "$repo/deploy/apache/istota-websocket.conf"
apache_conf "$tmp/apache-snippet.conf" "$apache_port" >"$tmp/apache.conf"
apache2 -X -f "$tmp/apache.conf" &
pids+=($!)
if wait_port "$apache_port"; then
	ws_through apache "$apache_port"
else
	fail "apache did not start: $(tail -n3 "$tmp/apache-error.log" 2>/dev/null)"
fi

# --- 5. systemd unit -------------------------------------------------------------------
unit=$repo/deploy/istota.service
# verify wants ExecStart's binary to exist: give it one in a scratch copy of the unit.
mkdir -p "$tmp/systemd"
sed "s#^ExecStart=/usr/local/bin/istota #ExecStart=$app/bin/amd64/istota #" "$unit" >"$tmp/systemd/istota.service"
check "systemd-analyze verify accepts deploy/istota.service" bash -c 'out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$1" 2>&1); [ -z "$out" ] || { echo "$out"; false; }' _ "$tmp/systemd/istota.service"
for want in 'User=istota' 'StateDirectory=istota' 'Restart=on-failure' 'NoNewPrivileges=yes' 'ProtectSystem=strict' \
	'ExecStart=/usr/local/bin/istota serve -c /etc/istota/istota.toml'; do
	check "istota.service has $want" grep -qx "$want" "$unit"
done
# These make /proc partly hidden or read-only; an unprivileged user namespace may then not
# mount a fresh proc, and bwrap --proc fails. Namespaces must stay allowed for bwrap.
for bad in ProtectKernelTunables=yes ProtectKernelLogs=yes ProtectHostname=yes ProtectProc= ProcSubset= RestrictNamespaces=yes PrivateUsers=yes; do
	check "istota.service does not set $bad (bwrap would fail)" bash -c '! grep -q "^$1" "$2"' _ "$bad" "$unit"
done

echo "test-appstore: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
