<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IRequest;

/** An OCS request from the settings pages: OCS-APIRequest set, no CSRF token. */
final class TestRequest implements IRequest {
	/**
	 * @param array<string, string> $headers
	 * @param array<string, mixed> $params
	 */
	public function __construct(
		public string $method = 'GET',
		public array $headers = ['OCS-APIRequest' => 'true'],
		public array $params = [],
		public string $uri = '/ocs/v2.php/apps/istota/api/v1/me',
	) {
	}

	public function getHeader(string $name): string {
		foreach ($this->headers as $header => $value) {
			if (strcasecmp($header, $name) === 0) {
				return $value;
			}
		}
		return '';
	}

	public function getParam(string $key, $default = null) {
		return $this->params[$key] ?? $default;
	}

	public function getParams(): array {
		return $this->params;
	}

	public function getMethod(): string {
		return $this->method;
	}

	public function getRequestUri(): string {
		return $this->uri;
	}

	public function passesCSRFCheck(): bool {
		return false;
	}
}
