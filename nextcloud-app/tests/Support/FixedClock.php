<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\AppFramework\Utility\ITimeFactory;

/** ITimeFactory with a time the test sets; defaults to the real clock. */
final class FixedClock implements ITimeFactory {
	public function __construct(
		public ?int $now = null,
	) {
	}

	public function getTime(): int {
		return $this->now ?? time();
	}
}
