<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\SetupCheck;

use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\FakeSidecarTestCase;
use OCA\Istota\Tests\Support\Harness;
use OCP\SetupCheck\SetupResult;

/** The admin overview's check against a real (fake) sidecar in every state that matters. */
class SidecarSetupCheckTest extends FakeSidecarTestCase {
	protected function setUp(): void {
		parent::setUp();
		self::$sidecar->control(['version' => Harness::APP_VERSION]);
	}

	private function check(Harness $h): SetupResult {
		try {
			return $h->setupCheck()->run();
		} finally {
			$h->close();
		}
	}

	private function healthy(): Harness {
		$h = new Harness(self::$sidecar->url, self::SECRET);
		$h->settings->ensureBotSecret();
		return $h;
	}

	public function testNameAndCategory(): void {
		$h = $this->healthy();
		$check = $h->setupCheck();
		$this->assertSame('Istota sidecar', $check->getName());
		$this->assertSame('system', $check->getCategory());
		$h->close();
	}

	public function testAllGood(): void {
		$result = $this->check($this->healthy());
		$this->assertSame(SetupResult::SUCCESS, $result->getSeverity());
		$this->assertStringContainsString(Harness::APP_VERSION, (string)$result->getDescription());
	}

	public function testNotSetUp(): void {
		$result = $this->check(new Harness(self::$sidecar->url, null));
		$this->assertSame(SetupResult::ERROR, $result->getSeverity());
		$this->assertStringContainsString('occ istota:setup', (string)$result->getDescription());
	}

	public function testSidecarDown(): void {
		$result = $this->check(new Harness(FakeSidecar::deadUrl(), self::SECRET));
		$this->assertSame(SetupResult::ERROR, $result->getSeverity());
		$this->assertStringContainsString('does not answer', (string)$result->getDescription());
	}

	public function testSidecarWithAnotherSecret(): void {
		$other = 'another-shared-secret-0123456789-0123456789-abcd';
		$result = $this->check(new Harness(self::$sidecar->url, $other));
		$this->assertSame(SetupResult::ERROR, $result->getSeverity());
		$this->assertStringContainsString('bad_signature', (string)$result->getDescription());
		$this->assertStringNotContainsString($other, (string)$result->getDescription());
		$this->assertStringNotContainsString(self::SECRET, (string)$result->getDescription());
	}

	public function testVersionMismatchIsAWarning(): void {
		self::$sidecar->control(['version' => '0.0.9']);
		$result = $this->check($this->healthy());
		$this->assertSame(SetupResult::WARNING, $result->getSeverity());
		$this->assertStringContainsString('runs version 0.0.9 but the app is version ' . Harness::APP_VERSION, (string)$result->getDescription());
	}

	public function testTalkMissingOrBotNotRegisteredIsAWarning(): void {
		$h = $this->healthy();
		unset($h->apps->installed['spreed']);
		$result = $this->check($h);
		$this->assertSame(SetupResult::WARNING, $result->getSeverity());
		$this->assertStringContainsString('Talk 21', (string)$result->getDescription());

		$result = $this->check(new Harness(self::$sidecar->url, self::SECRET));
		$this->assertSame(SetupResult::WARNING, $result->getSeverity());
		$this->assertStringContainsString('Talk bot is not registered', (string)$result->getDescription());
	}
}
