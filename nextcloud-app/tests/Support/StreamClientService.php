<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Http\Client\IClient;
use OCP\Http\Client\IClientService;

/** IClientService whose clients do real HTTP/1.1 over TCP sockets (see StreamClient). */
final class StreamClientService implements IClientService {
	/** @var list<array{method: string, uri: string, options: array}> every request made, for assertions */
	public array $requests = [];

	public function newClient(): IClient {
		return new StreamClient($this);
	}
}
