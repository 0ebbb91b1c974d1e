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

class DataResponse extends Response {
	protected $data;

	public function __construct(mixed $data = [], int $statusCode = Http::STATUS_OK, array $headers = []) {
		parent::__construct($statusCode, $headers);
		$this->data = $data;
	}

	public function setData($data) {
		$this->data = $data;
		return $this;
	}

	public function getData() {
		return $this->data;
	}
}
