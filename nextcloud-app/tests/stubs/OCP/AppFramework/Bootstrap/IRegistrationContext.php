<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework\Bootstrap;

interface IRegistrationContext {
	public function registerEventListener(string $event, string $listener, int $priority = 0): void;

	/** @param class-string<\OCP\SetupCheck\ISetupCheck> $setupCheckClass */
	public function registerSetupCheck(string $setupCheckClass): void;
}
