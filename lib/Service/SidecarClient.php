<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\SidecarNotConfiguredException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCA\Istota\Exception\SidecarUnavailableException;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\Http\Client\IClientService;

/**
 * SidecarClient speaks docs/app-sidecar-protocol.md over Nextcloud's HTTP client. Every
 * request except the health check is signed at send time. Failures come back as typed
 * exceptions: SidecarNotConfiguredException (cannot try), SidecarUnavailableException
 * (try again later: no answer, timeout, 5xx) and SidecarRejectedException (4xx).
 */
class SidecarClient {
	public const PATH_HEALTH = '/v1/health';
	public const PATH_PING = '/v1/ping';
	public const PATH_TALK_EVENTS = '/v1/talk/events';

	/** Timeouts for admin-facing calls (occ, background job), in seconds. */
	public const DEFAULT_TIMEOUT = 5.0;
	public const DEFAULT_CONNECT_TIMEOUT = 2.0;

	/**
	 * Timeout of the settings pages' calls: a person waits for the answer, and a USER.md
	 * save may push to Nextcloud's WebDAV before the sidecar answers.
	 */
	public const PAGE_TIMEOUT = 10.0;

	/** Longest sidecar error message carried into our own exception messages. */
	private const MAX_MESSAGE_LENGTH = 300;

	public function __construct(
		private readonly IClientService $clients,
		private readonly AppSettings $settings,
		private readonly RequestSigner $signer,
		private readonly ITimeFactory $time,
	) {
	}

	/**
	 * GET /v1/health (unsigned): {"status":"ok","version":…,"schema":…}.
	 *
	 * @return array<string, mixed>
	 */
	public function health(float $timeout = self::DEFAULT_TIMEOUT): array {
		return $this->request('GET', self::PATH_HEALTH, null, signed: false, timeout: $timeout);
	}

	/**
	 * POST /v1/ping (signed): proves that both sides hold the same shared secret.
	 *
	 * @return array<string, mixed> {"pong":…,"version":…,"time":…}
	 */
	public function ping(string $echo, float $timeout = self::DEFAULT_TIMEOUT): array {
		$body = json_encode(['nonce_echo' => $echo], JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
		return $this->request('POST', self::PATH_PING, $body, timeout: $timeout);
	}

	/**
	 * POST /v1/talk/events (signed) with an already encoded event body.
	 *
	 * @return array<string, mixed> the sidecar's answer, e.g. {"status":"accepted","addressed":true}
	 */
	public function postTalkEvent(string $body, float $timeout, float $connectTimeout): array {
		return $this->request('POST', self::PATH_TALK_EVENTS, $body, timeout: $timeout, connectTimeout: $connectTimeout);
	}

	/**
	 * A path below /v1/users/{uid}/ with the user id percent-encoded as one segment and an
	 * optional query (RFC 3986 encoding, keys in the given order). $rest is already encoded.
	 *
	 * @param array<string, scalar> $query
	 */
	public static function userPath(string $uid, string $rest, array $query = []): string {
		if ($uid === '') {
			throw new \InvalidArgumentException('empty user id');
		}
		return '/v1/users/' . rawurlencode($uid) . '/' . ltrim($rest, '/') . self::query($query);
	}

	/**
	 * "?k=v&…" for a non-empty query, "" otherwise.
	 *
	 * @param array<string, scalar> $query
	 */
	public static function query(array $query): string {
		return $query === [] ? '' : '?' . http_build_query($query, '', '&', PHP_QUERY_RFC3986);
	}

	/**
	 * Signed GET of a JSON resource.
	 *
	 * @return array<string, mixed>
	 */
	public function getJson(string $pathAndQuery, float $timeout = self::PAGE_TIMEOUT): array {
		return $this->request('GET', $pathAndQuery, null, timeout: $timeout);
	}

	/**
	 * Signed POST; $data null sends no body at all.
	 *
	 * @param ?array<string, mixed> $data
	 * @return array<string, mixed>
	 */
	public function postJson(string $pathAndQuery, ?array $data = null, float $timeout = self::PAGE_TIMEOUT, ?float $connectTimeout = null): array {
		return $this->request('POST', $pathAndQuery, $data === null ? null : self::encode($data), timeout: $timeout, connectTimeout: $connectTimeout);
	}

	/**
	 * Signed PUT of a JSON object.
	 *
	 * @param array<string, mixed> $data
	 * @return array<string, mixed>
	 */
	public function putJson(string $pathAndQuery, array $data, float $timeout = self::PAGE_TIMEOUT): array {
		return $this->request('PUT', $pathAndQuery, self::encode($data), timeout: $timeout);
	}

	/**
	 * Signed DELETE without a body.
	 *
	 * @return array<string, mixed>
	 */
	public function deleteJson(string $pathAndQuery, float $timeout = self::PAGE_TIMEOUT): array {
		return $this->request('DELETE', $pathAndQuery, null, timeout: $timeout);
	}

	/**
	 * A JSON object body: an empty array is "{}", never "[]", since every body of the
	 * protocol is an object.
	 *
	 * @param array<string, mixed> $data
	 */
	public static function encode(array $data): string {
		return json_encode($data === [] ? new \stdClass() : $data, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
	}

	/**
	 * Sends one request to the sidecar. $pathAndQuery starts with "/", is already
	 * percent-encoded, and is signed byte for byte as sent (after the path of the
	 * configured sidecar URL, if it has one).
	 *
	 * @return array<string, mixed> the decoded JSON of a 2xx answer ([] when it is not JSON)
	 * @throws SidecarNotConfiguredException
	 * @throws SidecarUnavailableException
	 * @throws SidecarRejectedException
	 */
	public function request(
		string $method,
		string $pathAndQuery,
		?string $body = null,
		bool $signed = true,
		float $timeout = self::DEFAULT_TIMEOUT,
		?float $connectTimeout = null,
	): array {
		if (!str_starts_with($pathAndQuery, '/')) {
			throw new \InvalidArgumentException('sidecar path must start with "/"');
		}
		$method = strtoupper($method);
		[$base, $basePath] = $this->base();

		$headers = ['Accept' => 'application/json'];
		if ($body !== null) {
			$headers['Content-Type'] = 'application/json';
		}
		if ($signed) {
			$secret = $this->settings->sharedSecret();
			if ($secret === '') {
				throw new SidecarNotConfiguredException('no shared secret yet: run occ istota:setup');
			}
			$headers += $this->signer->headers($secret, $method, $basePath . $pathAndQuery, $body ?? '', $this->time->getTime());
		}
		$options = [
			'headers' => $headers,
			'timeout' => $timeout,
			'connect_timeout' => min($connectTimeout ?? self::DEFAULT_CONNECT_TIMEOUT, $timeout),
			'http_errors' => false,
			// The sidecar normally listens on loopback, which Nextcloud refuses by default.
			'nextcloud' => ['allow_local_address' => true],
		];
		if ($body !== null) {
			$options['body'] = $body;
		}

		try {
			$response = $this->clients->newClient()->request($method, $base . $pathAndQuery, $options);
			$status = $response->getStatusCode();
			$raw = $response->getBody();
			if (is_resource($raw)) {
				$raw = stream_get_contents($raw);
			}
		} catch (\Throwable $e) {
			throw new SidecarUnavailableException(
				sprintf('sidecar at %s did not answer %s %s: %s', $base, $method, $pathAndQuery, $e->getMessage()),
				null,
				$e,
			);
		}

		$data = json_decode((string)$raw, true);
		if ($status >= 200 && $status < 300) {
			return is_array($data) ? $data : [];
		}
		$code = '';
		$message = '';
		$fields = [];
		$currentEtag = '';
		if (is_array($data) && is_array($data['error'] ?? null)) {
			$error = $data['error'];
			$code = is_string($error['code'] ?? null) ? $error['code'] : '';
			$message = is_string($error['message'] ?? null) ? mb_substr($error['message'], 0, self::MAX_MESSAGE_LENGTH) : '';
			$currentEtag = is_string($error['current_etag'] ?? null) ? $error['current_etag'] : '';
			if (is_array($error['fields'] ?? null)) {
				foreach ($error['fields'] as $field => $problem) {
					if (is_scalar($problem)) {
						$fields[(string)$field] = mb_substr((string)$problem, 0, self::MAX_MESSAGE_LENGTH);
					}
				}
			}
		}
		$what = sprintf('HTTP %d%s%s', $status, $code === '' ? '' : ' ' . $code, $message === '' ? '' : ': ' . $message);
		if ($status >= 400 && $status < 500) {
			throw new SidecarRejectedException($status, $code, sprintf('sidecar refused %s %s: %s', $method, $pathAndQuery, $what), $message, $fields, $currentEtag);
		}
		throw new SidecarUnavailableException(sprintf('sidecar failed %s %s: %s', $method, $pathAndQuery, $what), $status, null, $code, $message);
	}

	/**
	 * The configured base URL without a trailing slash, and its path (signed as part of
	 * every request path).
	 *
	 * @return array{0: string, 1: string}
	 */
	private function base(): array {
		$base = $this->settings->sidecarUrl();
		$parts = parse_url($base);
		$scheme = is_array($parts) ? strtolower((string)($parts['scheme'] ?? '')) : '';
		if (!in_array($scheme, ['http', 'https'], true) || (string)($parts['host'] ?? '') === ''
			|| isset($parts['query']) || isset($parts['fragment'])) {
			throw new SidecarNotConfiguredException('the sidecar_url app config is not an http(s) base URL');
		}
		return [$base, rtrim((string)($parts['path'] ?? ''), '/')];
	}
}
