<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * CheckResult is one line of `occ istota:self-test`. The detail never holds a secret.
 */
final class CheckResult {
	public function __construct(
		public readonly string $name,
		public readonly bool $ok,
		public readonly string $detail,
	) {
	}
}
