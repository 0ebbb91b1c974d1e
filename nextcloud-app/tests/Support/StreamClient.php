<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Http\Client\IClient;
use OCP\Http\Client\IResponse;

/**
 * StreamClient is a small real HTTP/1.1 client over PHP sockets (the curl extension is not
 * installed here) that honours the request options the way Nextcloud's Guzzle-based
 * client does: 'headers', 'body', 'timeout' (total, seconds), 'connect_timeout',
 * 'http_errors' (4xx/5xx throw unless false) and 'nextcloud' => ['allow_local_address']
 * (loopback and private hosts are refused without it).
 */
final class StreamClient implements IClient {
	public function __construct(
		private readonly StreamClientService $service,
	) {
	}

	public function request(string $method, string $uri, array $options = []): IResponse {
		$this->service->requests[] = ['method' => $method, 'uri' => $uri, 'options' => $options];
		$parts = parse_url($uri);
		if (!is_array($parts) || ($parts['scheme'] ?? '') !== 'http' || !isset($parts['host'])) {
			throw new \InvalidArgumentException('the test client speaks plain http only: ' . $uri);
		}
		$host = $parts['host'];
		$port = $parts['port'] ?? 80;
		if (self::isLocal($host) && !(($options['nextcloud']['allow_local_address'] ?? false) === true)) {
			throw new \RuntimeException(sprintf('Host "%s" violates local access rules', $host));
		}
		$timeout = (float)($options['timeout'] ?? IClient::DEFAULT_REQUEST_TIMEOUT);
		$connectTimeout = (float)($options['connect_timeout'] ?? $timeout);
		$deadline = microtime(true) + $timeout;

		$socket = @stream_socket_client(sprintf('tcp://%s:%d', str_contains($host, ':') ? '[' . trim($host, '[]') . ']' : $host, $port), $errno, $errstr, max(0.001, min($connectTimeout, $timeout)));
		if ($socket === false) {
			throw new \RuntimeException(sprintf('Failed to connect to %s port %d: %s', $host, $port, $errstr));
		}
		try {
			$body = (string)($options['body'] ?? '');
			$target = ($parts['path'] ?? '/') . (isset($parts['query']) ? '?' . $parts['query'] : '');
			$headers = ['Host' => $host . ':' . $port, 'User-Agent' => 'Nextcloud-Server-Crawler/test', 'Connection' => 'close'];
			foreach (($options['headers'] ?? []) as $name => $value) {
				$headers[$name] = (string)$value;
			}
			if ($body !== '' || in_array(strtoupper($method), ['POST', 'PUT', 'PATCH'], true)) {
				$headers['Content-Length'] = (string)strlen($body);
			}
			$request = strtoupper($method) . ' ' . $target . " HTTP/1.1\r\n";
			foreach ($headers as $name => $value) {
				$request .= $name . ': ' . $value . "\r\n";
			}
			$request .= "\r\n" . $body;
			if (@fwrite($socket, $request) !== strlen($request)) {
				throw new \RuntimeException('could not send the request to ' . $uri);
			}
			$raw = '';
			while (!feof($socket)) {
				$remaining = $deadline - microtime(true);
				if ($remaining <= 0) {
					throw new \RuntimeException(sprintf('Operation timed out after %d milliseconds', (int)($timeout * 1000)));
				}
				stream_set_timeout($socket, (int)floor($remaining), (int)(fmod($remaining, 1) * 1e6));
				$chunk = fread($socket, 65536);
				if ($chunk === false || ($chunk === '' && stream_get_meta_data($socket)['timed_out'])) {
					if (microtime(true) >= $deadline) {
						throw new \RuntimeException(sprintf('Operation timed out after %d milliseconds', (int)($timeout * 1000)));
					}
					continue;
				}
				$raw .= $chunk;
			}
		} finally {
			fclose($socket);
		}
		$response = self::parse($raw);
		if (($options['http_errors'] ?? true) !== false && $response->getStatusCode() >= 400) {
			throw new \RuntimeException(sprintf('%s %s resulted in a %d response', $method, $uri, $response->getStatusCode()));
		}
		return $response;
	}

	private static function parse(string $raw): StreamResponse {
		$split = strpos($raw, "\r\n\r\n");
		if ($split === false || !preg_match('#^HTTP/1\.[01] (\d{3})#', $raw, $m)) {
			throw new \RuntimeException('malformed HTTP response');
		}
		$headers = [];
		foreach (array_slice(explode("\r\n", substr($raw, 0, $split)), 1) as $line) {
			[$name, $value] = array_map('trim', explode(':', $line, 2)) + [1 => ''];
			$headers[$name][] = $value;
		}
		$body = substr($raw, $split + 4);
		$response = new StreamResponse((int)$m[1], $headers, $body);
		if (strtolower($response->getHeader('Transfer-Encoding')) === 'chunked') {
			$response = new StreamResponse((int)$m[1], $headers, self::unchunk($body));
		}
		return $response;
	}

	private static function unchunk(string $body): string {
		$out = '';
		while ($body !== '') {
			$eol = strpos($body, "\r\n");
			if ($eol === false) {
				break;
			}
			$size = hexdec(trim(explode(';', substr($body, 0, $eol))[0]));
			if ($size === 0) {
				break;
			}
			$out .= substr($body, $eol + 2, (int)$size);
			$body = substr($body, $eol + 2 + (int)$size + 2);
		}
		return $out;
	}

	private static function isLocal(string $host): bool {
		$host = trim($host, '[]');
		if ($host === 'localhost' || str_ends_with($host, '.localhost')) {
			return true;
		}
		if (filter_var($host, FILTER_VALIDATE_IP) === false) {
			return false;
		}
		return filter_var($host, FILTER_VALIDATE_IP, FILTER_FLAG_NO_PRIV_RANGE | FILTER_FLAG_NO_RES_RANGE) === false;
	}
}
