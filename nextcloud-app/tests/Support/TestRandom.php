<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Security\ISecureRandom;

/** ISecureRandom over random_int, counting calls so tests see when a secret is made. */
final class TestRandom implements ISecureRandom {
	public int $calls = 0;

	public function generate(int $length,
		string $characters = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'): string {
		$this->calls++;
		$out = '';
		$max = strlen($characters) - 1;
		for ($i = 0; $i < $length; $i++) {
			$out .= $characters[random_int(0, $max)];
		}
		return $out;
	}
}
