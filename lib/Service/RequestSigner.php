<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\SidecarNotConfiguredException;

/**
 * RequestSigner implements signing version v1 of docs/app-sidecar-protocol.md: an
 * HMAC-SHA256 with the shared secret over version, method, path with query, timestamp,
 * nonce and the SHA-256 of the raw body. The Go side is sidecar/internal/signing; both
 * are checked against sidecar/internal/signing/testdata/vectors.json.
 *
 * A secret shorter than MIN_SECRET_BYTES is refused, whoever passes it: an empty key
 * (a secret never filled in) would let anyone sign.
 *
 * Secret parameters are marked #[\SensitiveParameter] so that PHP (8.2+) leaves them out
 * of any stack trace that ends up in the Nextcloud log.
 */
class RequestSigner {
	public const VERSION = 'v1';
	public const HEADER_TIMESTAMP = 'X-Istota-Timestamp';
	public const HEADER_NONCE = 'X-Istota-Nonce';
	public const HEADER_SIGNATURE = 'X-Istota-Signature';
	public const MIN_SECRET_BYTES = 32;

	/** @throws SidecarNotConfiguredException when the secret is missing or too short */
	public static function assertUsableSecret(#[\SensitiveParameter] string $secret): void {
		if (strlen($secret) < self::MIN_SECRET_BYTES) {
			throw new SidecarNotConfiguredException('the shared secret is missing or shorter than ' . self::MIN_SECRET_BYTES . ' bytes: run occ istota:setup');
		}
	}

	/** The string that is signed; lines joined by "\n", no trailing newline. */
	public function canonical(string $method, string $pathAndQuery, string $timestamp, string $nonce, string $body): string {
		return implode("\n", [
			self::VERSION,
			strtoupper($method),
			$pathAndQuery,
			$timestamp,
			$nonce,
			hash('sha256', $body),
		]);
	}

	/**
	 * The value of the X-Istota-Signature header: "v1=" and the lowercase hex HMAC.
	 *
	 * @throws SidecarNotConfiguredException when the secret is missing or too short
	 */
	public function signature(#[\SensitiveParameter] string $secret, string $method, string $pathAndQuery, string $timestamp, string $nonce, string $body): string {
		self::assertUsableSecret($secret);
		return self::VERSION . '=' . hash_hmac('sha256', $this->canonical($method, $pathAndQuery, $timestamp, $nonce, $body), $secret);
	}

	/**
	 * The three signing headers for one request, with a fresh nonce (16 random bytes as
	 * 32 lowercase hex characters). Sign at send time: the sidecar refuses timestamps more
	 * than 300 s away and nonces it has seen before.
	 *
	 * @return array<string, string>
	 */
	public function headers(#[\SensitiveParameter] string $secret, string $method, string $pathAndQuery, string $body, int $timestamp): array {
		$ts = (string)$timestamp;
		$nonce = bin2hex(random_bytes(16));
		return [
			self::HEADER_TIMESTAMP => $ts,
			self::HEADER_NONCE => $nonce,
			self::HEADER_SIGNATURE => $this->signature($secret, $method, $pathAndQuery, $ts, $nonce, $body),
		];
	}

	/** How far a request's timestamp may be from this clock, in seconds (the sidecar's MaxSkew). */
	public const MAX_SKEW = 300;

	/**
	 * Whether a request the sidecar sent to the app carries a valid signature at time
	 * $now: the same scheme in the other direction. Replays within the window are not
	 * caught here; only idempotent actions may rely on this alone.
	 *
	 * @throws SidecarNotConfiguredException when the secret is missing or too short
	 */
	public function verify(#[\SensitiveParameter] string $secret, string $method, string $pathAndQuery, string $timestamp, string $nonce, string $signature, string $body, int $now): bool {
		self::assertUsableSecret($secret);
		if (preg_match('/^\d{1,12}$/', $timestamp) !== 1 || strlen($nonce) < 16 || strlen($nonce) > 128 || !str_starts_with($signature, self::VERSION . '=')) {
			return false;
		}
		if (abs($now - (int)$timestamp) > self::MAX_SKEW) {
			return false;
		}
		return hash_equals($this->signature($secret, $method, $pathAndQuery, $timestamp, $nonce, $body), strtolower($signature));
	}

	/**
	 * verify() with the timestamp, nonce and signature read from a request's headers (as
	 * headers() writes them); a missing header fails the check.
	 *
	 * @param array<string, string> $headers
	 * @throws SidecarNotConfiguredException when the secret is missing or too short
	 */
	public function verifyHeaders(#[\SensitiveParameter] string $secret, string $method, string $pathAndQuery, array $headers, string $body, int $now): bool {
		return $this->verify($secret, $method, $pathAndQuery, $headers[self::HEADER_TIMESTAMP] ?? '',
			$headers[self::HEADER_NONCE] ?? '', $headers[self::HEADER_SIGNATURE] ?? '', $body, $now);
	}
}
