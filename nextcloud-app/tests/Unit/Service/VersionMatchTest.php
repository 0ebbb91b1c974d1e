<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\Service\VersionMatch;
use PHPUnit\Framework\TestCase;

class VersionMatchTest extends TestCase {
	/** @return array<string, array{0: string, 1: string, 2: bool}> */
	public function pairs(): array {
		return [
			'equal' => ['0.1.0', '0.1.0', true],
			'dev build of the same release' => ['0.1.0', '0.1.0-dev', true],
			'v prefix and build metadata' => ['0.1.0', 'v0.1.0+abc123', true],
			'two-part version' => ['1.2', '1.2.0', true],
			'patch differs' => ['0.1.1', '0.1.0', false],
			'minor differs' => ['0.2.0', '0.1.0', false],
			'sidecar version unknown' => ['0.1.0', '', false],
			'garbage' => ['0.1.0', 'fake-1.2.3', false],
			'app version unknown' => ['', '', false],
		];
	}

	/** @dataProvider pairs */
	public function testMatches(string $app, string $sidecar, bool $want): void {
		$this->assertSame($want, VersionMatch::matches($app, $sidecar));
	}
}
