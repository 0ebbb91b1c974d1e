<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\Http\Client;

interface IClient {
	public const DEFAULT_REQUEST_TIMEOUT = 30;

	/**
	 * Guzzle request options plus 'nextcloud' => ['allow_local_address' => bool].
	 *
	 * @throws \Exception on transport errors, and on 4xx/5xx unless 'http_errors' => false
	 */
	public function request(string $method, string $uri, array $options = []): IResponse;
}
