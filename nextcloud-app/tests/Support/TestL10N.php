<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IL10N;

/** English IL10N: substitutes parameters with vsprintf as Nextcloud's L10N does. */
final class TestL10N implements IL10N {
	public function t(string $text, $parameters = []): string {
		return vsprintf($text, is_array($parameters) ? $parameters : [$parameters]);
	}

	public function n(string $text_singular, string $text_plural, int $count, array $parameters = []): string {
		return vsprintf(str_replace('%n', (string)$count, $count === 1 ? $text_singular : $text_plural), $parameters);
	}
}
