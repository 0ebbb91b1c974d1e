<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\AppFramework\Services\IInitialState;

/**
 * IInitialState that keeps what a page provides, encoded as Nextcloud does for the page
 * (JSON in a hidden input), so tests see exactly what the browser would.
 */
final class TestInitialState implements IInitialState {
	/** @var array<string, string> key => JSON */
	public array $provided = [];

	public function provideInitialState(string $key, $data): void {
		$this->provided[$key] = json_encode($data, JSON_THROW_ON_ERROR);
	}

	public function provideLazyInitialState(string $key, \Closure $closure): void {
		$this->provideInitialState($key, $closure());
	}
}
