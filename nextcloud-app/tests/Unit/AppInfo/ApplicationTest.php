<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\AppInfo;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Listener\BotInvokeListener;
use OCA\Istota\Listener\UserEligibilityListener;
use OCA\Istota\SetupCheck\SidecarSetupCheck;
use OCP\AppFramework\Bootstrap\IRegistrationContext;
use PHPUnit\Framework\TestCase;

class ApplicationTest extends TestCase {
	public function testRegistersTheTalkListenerByClassNameAndTheSetupCheck(): void {
		$context = new class implements IRegistrationContext {
			/** @var list<array{0: string, 1: string}> */
			public array $listeners = [];
			/** @var list<string> */
			public array $setupChecks = [];

			public function registerEventListener(string $event, string $listener, int $priority = 0): void {
				$this->listeners[] = [$event, $listener];
			}

			public function registerSetupCheck(string $setupCheckClass): void {
				$this->setupChecks[] = $setupCheckClass;
			}
		};
		(new Application())->register($context);
		$this->assertSame([
			['OCA\Talk\Events\BotInvokeEvent', BotInvokeListener::class],
			['OCP\User\Events\UserCreatedEvent', UserEligibilityListener::class],
			['OCP\Group\Events\UserAddedEvent', UserEligibilityListener::class],
		], $context->listeners);
		$this->assertSame([SidecarSetupCheck::class], $context->setupChecks);
	}

	/**
	 * Nextcloud loads the app and its listener class whether Talk is there or not.
	 *
	 * @runInSeparateProcess
	 * @preserveGlobalState disabled
	 */
	public function testLoadsWithoutTalk(): void {
		putenv('ISTOTA_TEST_WITHOUT_TALK=1');
		$this->assertTrue(class_exists(Application::class));
		$this->assertTrue(class_exists(BotInvokeListener::class));
		$this->assertFalse(class_exists('OCA\Talk\Events\BotInvokeEvent'));
	}
}
