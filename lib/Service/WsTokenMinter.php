<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\SidecarNotConfiguredException;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\IURLGenerator;

/**
 * WsTokenMinter gives the browser a short-lived token for the sidecar's WebSocket of live
 * progress (docs/user-api.md, "Live progress"); the browser cannot sign requests itself:
 *
 *   payload = base64url_nopad(JSON {"uid", "exp", "nonce"})
 *   token   = "v1." + payload + "." + base64url_nopad(HMAC-SHA256(shared secret, "istota-ws-v1\n" + payload))
 *
 * The token only opens a connection; it names the user the Nextcloud session proved.
 */
class WsTokenMinter {
	public const VERSION = 'v1';
	public const LABEL = 'istota-ws-v1';
	/** Seconds a token stays valid; the contract allows at most 120. */
	public const TTL = 60;

	public function __construct(
		private readonly AppSettings $settings,
		private readonly ITimeFactory $time,
		private readonly IURLGenerator $urls,
	) {
	}

	/**
	 * A token for $uid and the WebSocket URL to open with it (token included as ?token=).
	 *
	 * @return array{token: string, url: string, expires_in: int}
	 * @throws SidecarNotConfiguredException when there is no shared secret yet
	 */
	public function mint(string $uid): array {
		if ($uid === '') {
			throw new \InvalidArgumentException('empty user id');
		}
		$secret = $this->settings->sharedSecret();
		if ($secret === '') {
			throw new SidecarNotConfiguredException('no shared secret yet: run occ istota:setup');
		}
		$token = self::token($secret, $uid, $this->time->getTime() + self::TTL, bin2hex(random_bytes(16)));
		return [
			'token' => $token,
			'url' => $this->socketUrl() . '?token=' . rawurlencode($token),
			'expires_in' => self::TTL,
		];
	}

	/**
	 * The token for these exact values (the test vectors pin it byte for byte).
	 *
	 * @throws SidecarNotConfiguredException when the secret is missing or too short
	 */
	public static function token(#[\SensitiveParameter] string $secret, string $uid, int $exp, string $nonce): string {
		RequestSigner::assertUsableSecret($secret);
		$payload = self::base64url(self::payloadJson($uid, $exp, $nonce));
		return self::VERSION . '.' . $payload . '.' . self::base64url(hash_hmac('sha256', self::LABEL . "\n" . $payload, $secret, true));
	}

	/** The JSON inside the token: keys in the order uid, exp, nonce. */
	public static function payloadJson(string $uid, int $exp, string $nonce): string {
		return json_encode(['uid' => $uid, 'exp' => $exp, 'nonce' => $nonce], JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
	}

	public static function base64url(string $bytes): string {
		return rtrim(strtr(base64_encode($bytes), '+/', '-_'), '=');
	}

	/**
	 * ws(s)://host[:port]/<ws path>: the configured path on Nextcloud's own host (the
	 * reverse-proxy location sits at the host's root, whatever Nextcloud's webroot is), or
	 * the configured ws(s):// URL as it is.
	 */
	private function socketUrl(): string {
		$path = $this->settings->wsPath();
		if (preg_match('~^wss?://~i', $path) === 1) {
			return $path;
		}
		$parts = parse_url($this->urls->getAbsoluteURL('/'));
		$scheme = is_array($parts) && strtolower((string)($parts['scheme'] ?? '')) === 'https' ? 'wss' : 'ws';
		$host = is_array($parts) ? (string)($parts['host'] ?? '') : '';
		if (str_contains($host, ':') && !str_starts_with($host, '[')) {
			$host = '[' . $host . ']';
		}
		$port = is_array($parts) && isset($parts['port']) ? ':' . $parts['port'] : '';
		return $scheme . '://' . $host . $port . $path;
	}
}
