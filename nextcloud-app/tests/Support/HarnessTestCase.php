<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

/**
 * HarnessTestCase gives every test a Harness of its own against the class's fake sidecar,
 * so that no database row, file or app config value outlives the test that made it. A
 * test adds its users and logs in by overriding setUp() after parent::setUp().
 */
abstract class HarnessTestCase extends FakeSidecarTestCase {
	protected Harness $h;

	protected function setUp(): void {
		parent::setUp();
		$this->h = $this->harness(self::$sidecar->url);
	}

	protected function tearDown(): void {
		$this->h->close();
	}

	/**
	 * Builds $this->h. A test whose harness needs Talk rooms or users overrides this rather
	 * than setUp(), so that a second harness it builds (against a dead URL, say) gets the
	 * same instance.
	 */
	protected function harness(string $url): Harness {
		return new Harness($url, static::SECRET);
	}
}
