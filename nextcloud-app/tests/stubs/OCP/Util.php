<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

/**
 * In Nextcloud addScript() queues the script for the page being rendered; here it is
 * recorded in $scripts so a test can see what a template asked for.
 */
class Util {
	/** @var list<array{0: string, 1: ?string}> application, file */
	public static array $scripts = [];

	public static function addScript(string $application, ?string $file = null, string $afterAppId = 'core', bool $prepend = false): void {
		self::$scripts[] = [$application, $file];
	}

	public static function addStyle(string $application, ?string $file = null, bool $prepend = false): void {
	}
}
