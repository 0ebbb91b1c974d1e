<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use PHPUnit\Framework\TestCase;

/**
 * FakeSidecarTestCase gives a test class one fake sidecar: php -S is started once per
 * class rather than per test to keep the suite fast, and emptied before every test so
 * that no test sees what an earlier one left there.
 *
 * A class that also wants a fresh Harness per test extends HarnessTestCase instead; one
 * that builds its harnesses itself (several per test, or against other URLs) extends this.
 */
abstract class FakeSidecarTestCase extends TestCase {
	/**
	 * The shared secret of the app and the fake sidecar. Only that both sides hold the same
	 * one matters; a class that wants another declares its own protected SECRET.
	 */
	protected const SECRET = 'fake-sidecar-shared-secret-0123456789-abcdefghijk';

	/**
	 * One slot for every subclass: PHPUnit runs a class's tests between its
	 * setUpBeforeClass() and tearDownAfterClass(), so no two classes need it at once.
	 */
	protected static FakeSidecar $sidecar;

	public static function setUpBeforeClass(): void {
		self::$sidecar = FakeSidecar::start(static::SECRET);
	}

	public static function tearDownAfterClass(): void {
		self::$sidecar->stop();
	}

	protected function setUp(): void {
		self::$sidecar->reset();
	}
}
