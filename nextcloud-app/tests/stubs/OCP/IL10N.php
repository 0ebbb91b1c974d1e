<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IL10N {
	public function t(string $text, $parameters = []): string;

	public function n(string $text_singular, string $text_plural, int $count, array $parameters = []): string;
}
