<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Http\Client\IResponse;

final class StreamResponse implements IResponse {
	/** @param array<string, list<string>> $headers */
	public function __construct(
		private readonly int $status,
		private readonly array $headers,
		private readonly string $body,
	) {
	}

	public function getBody() {
		return $this->body;
	}

	public function getStatusCode(): int {
		return $this->status;
	}

	public function getHeader(string $key): string {
		foreach ($this->headers as $name => $values) {
			if (strcasecmp($name, $key) === 0) {
				return $values[0] ?? '';
			}
		}
		return '';
	}

	public function getHeaders(): array {
		return $this->headers;
	}
}
