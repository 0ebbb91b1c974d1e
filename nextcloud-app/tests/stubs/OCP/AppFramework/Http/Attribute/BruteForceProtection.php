<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework\Http\Attribute;

use Attribute;

#[Attribute(Attribute::TARGET_METHOD | Attribute::IS_REPEATABLE)]
class BruteForceProtection {
	public function __construct(
		protected string $action,
	) {
	}

	public function getAction(): string {
		return $this->action;
	}
}
