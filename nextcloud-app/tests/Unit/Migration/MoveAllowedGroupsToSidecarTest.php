<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Migration;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Migration\MoveAllowedGroupsToSidecar;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Istota\Tests\Support\RecordingOutput;

/**
 * The app's old allowed_groups setting moves to the sidecar's access.groups; it is never
 * dropped while that would open the bot to everyone.
 */
class MoveAllowedGroupsToSidecarTest extends HarnessTestCase {
	private const KEY = MoveAllowedGroupsToSidecar::LEGACY_KEY;

	private RecordingOutput $output;

	protected function setUp(): void {
		parent::setUp();
		$this->output = new RecordingOutput();
	}

	private function step(?Harness $h = null): MoveAllowedGroupsToSidecar {
		$h ??= $this->h;
		return new MoveAllowedGroupsToSidecar($h->appConfig, $h->adminService(), $h->logger);
	}

	private function sidecarGroups(): array {
		return $this->h->adminService()->settings()['settings']['access']['groups'];
	}

	public function testNothingToDoWithoutTheOldKey(): void {
		$this->step()->run($this->output);
		$this->assertSame([], $this->h->http->requests);
	}

	public function testTheGroupsMoveAndTheKeyGoes(): void {
		$this->h->appConfig->setValueString(Application::APP_ID, self::KEY, '["staff","family"]');
		$this->step()->run($this->output);
		$this->assertSame(['staff', 'family'], $this->sidecarGroups());
		$this->assertFalse($this->h->appConfig->hasKey(Application::APP_ID, self::KEY));
		$this->step()->run($this->output);
		$this->assertSame(['staff', 'family'], $this->sidecarGroups(), 'running again changes nothing');
	}

	public function testAnArrayTypedValueMovesToo(): void {
		$this->h->appConfig->setValueArray(Application::APP_ID, self::KEY, ['staff']);
		$this->step()->run($this->output);
		$this->assertSame(['staff'], $this->sidecarGroups());
	}

	public function testTheSidecarsOwnListWins(): void {
		$this->h->adminService()->updateSettings(['access' => ['groups' => ['admins']]]);
		$this->h->appConfig->setValueString(Application::APP_ID, self::KEY, '["staff"]');
		$this->step()->run($this->output);
		$this->assertSame(['admins'], $this->sidecarGroups());
		$this->assertFalse($this->h->appConfig->hasKey(Application::APP_ID, self::KEY));
	}

	public function testAnEmptyListIsSimplyDropped(): void {
		$this->h->appConfig->setValueString(Application::APP_ID, self::KEY, '[]');
		$this->step()->run($this->output);
		$this->assertFalse($this->h->appConfig->hasKey(Application::APP_ID, self::KEY));
		$this->assertSame([], $this->h->http->requests);
	}

	public function testWhileTheSidecarIsDownTheKeyStaysAndTheAdminIsTold(): void {
		$h = new Harness(FakeSidecar::deadUrl(), self::SECRET);
		try {
			$h->appConfig->setValueString(Application::APP_ID, self::KEY, '["staff"]');
			$this->step($h)->run($this->output);
			$this->assertTrue($h->appConfig->hasKey(Application::APP_ID, self::KEY));
			$warnings = implode("\n", $this->output->of('warning'));
			$this->assertStringContainsString('staff', $warnings);
			$this->assertStringContainsString('Administration → Istota', $warnings);
		} finally {
			$h->close();
		}
	}
}
