<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework\Http;

use OCP\AppFramework\Http;

class Response {
	/** @var array<string, string> */
	private array $headers = [];
	private int $status;

	public function __construct(int $status = Http::STATUS_OK, array $headers = []) {
		$this->status = $status;
		foreach ($headers as $name => $value) {
			$this->headers[(string)$name] = (string)$value;
		}
	}

	private bool $throttled = false;
	private array $throttleMetadata = [];

	public function throttle(array $metadata = []) {
		$this->throttled = true;
		$this->throttleMetadata = $metadata;
	}

	public function isThrottled() {
		return $this->throttled;
	}

	public function getThrottleMetadata() {
		return $this->throttleMetadata;
	}

	public function addHeader($name, $value) {
		$this->headers[(string)$name] = (string)$value;
		return $this;
	}

	public function getHeaders() {
		return $this->headers;
	}

	public function setStatus($status) {
		$this->status = (int)$status;
		return $this;
	}

	public function getStatus() {
		return $this->status;
	}
}
