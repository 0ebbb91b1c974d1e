<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Migration;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Migration\InstallBot;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\RecordingOutput;
use OCA\Talk\Events\BotInstallEvent;
use OCP\Security\ISecureRandom;
use PHPUnit\Framework\TestCase;

class InstallBotTest extends TestCase {
	private Harness $h;

	protected function setUp(): void {
		$this->h = new Harness(FakeSidecar::deadUrl());
	}

	protected function tearDown(): void {
		$this->h->close();
	}

	private function step(): InstallBot {
		return new InstallBot($this->h->registration, $this->h->logger);
	}

	public function testGeneratesTheSecretOnceAndStoresItSensitive(): void {
		$output = new RecordingOutput();
		$this->step()->run($output);

		$secret = $this->h->settings->botSecret();
		$this->assertSame(64, strlen($secret));
		$this->assertMatchesRegularExpression('/^[' . preg_quote(ISecureRandom::CHAR_HUMAN_READABLE, '/') . ']{64}$/', $secret);
		$this->assertTrue($this->h->appConfig->isSensitive(Application::APP_ID, AppSettings::KEY_BOT_SECRET));
		$this->assertTrue($this->h->appConfig->isLazy(Application::APP_ID, AppSettings::KEY_BOT_SECRET));
		$this->assertSame([], $output->of('warning'));
		$this->assertCount(1, $output->of('info'));
		$this->assertStringNotContainsString($secret, implode("\n", $output->of('info')));
	}

	public function testDispatchesBotInstallEventForOurUrlWithFeatures14(): void {
		$this->step()->run(new RecordingOutput());

		$this->assertCount(1, $this->h->dispatcher->events);
		$event = $this->h->dispatcher->events[0];
		$this->assertInstanceOf(BotInstallEvent::class, $event);
		$this->assertSame('Istota', $event->getName());
		$this->assertSame('nextcloudapp://istota', $event->getUrl());
		$this->assertSame(14, $event->getFeatures(), 'event | response | reaction');
		$this->assertSame($this->h->settings->botSecret(), $event->getSecret());
		$this->assertStringContainsString('@Istota', $event->getDescription());
		$this->assertLessThanOrEqual(4000, strlen($event->getDescription()));
	}

	public function testReRunKeepsTheSecret(): void {
		$this->step()->run(new RecordingOutput());
		$secret = $this->h->settings->botSecret();
		$calls = $this->h->random->calls;

		$this->step()->run(new RecordingOutput());
		$this->step()->run(new RecordingOutput());

		$this->assertSame($secret, $this->h->settings->botSecret());
		$this->assertSame($calls, $this->h->random->calls, 'no new secret may be generated');
		$this->assertCount(3, $this->h->dispatcher->events);
		foreach ($this->h->dispatcher->events as $event) {
			$this->assertSame($secret, $event->getSecret());
		}
	}

	public function testUsesTheConfiguredBotName(): void {
		$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_BOT_NAME, 'Jarvis');
		$this->step()->run(new RecordingOutput());
		$this->assertSame('Jarvis', $this->h->dispatcher->events[0]->getName());
		$this->assertStringContainsString('@Jarvis', $this->h->dispatcher->events[0]->getDescription());
	}

	public function testDisabledTalkIsAWarningButTheSecretIsMade(): void {
		unset($this->h->apps->installed['spreed']);
		$output = new RecordingOutput();
		$this->step()->run($output);

		$this->assertSame([], $this->h->dispatcher->events);
		$this->assertCount(1, $output->of('warning'));
		$this->assertStringContainsString('Talk', $output->of('warning')[0]);
		$this->assertSame(64, strlen($this->h->settings->botSecret()));
	}

	public function testTalkRefusingTheBotIsAWarningWithoutTheSecret(): void {
		$this->h->dispatcher->onDispatch = function (BotInstallEvent $event): void {
			throw new \InvalidArgumentException('Bot with the same URL and a different secret is already registered (' . $event->getSecret() . ')');
		};
		$output = new RecordingOutput();
		$this->step()->run($output);

		$warnings = $output->of('warning');
		$this->assertCount(1, $warnings);
		$this->assertStringContainsString('different secret', $warnings[0]);
		$this->assertStringNotContainsString($this->h->settings->botSecret(), $warnings[0]);
	}

	public function testUnexpectedFailureIsAWarningAndLogged(): void {
		$this->h->appConfig->setValueInt(Application::APP_ID, AppSettings::KEY_BOT_SECRET, 5, lazy: true);
		$output = new RecordingOutput();
		$this->step()->run($output);
		$this->assertCount(1, $output->of('warning'));
		$this->assertCount(1, $this->h->logger->messages('error'));
		$this->assertSame([], $this->h->dispatcher->events);
	}

	/**
	 * Without Talk its classes cannot be loaded at all; the step must still pass.
	 *
	 * @runInSeparateProcess
	 * @preserveGlobalState disabled
	 */
	public function testMissingTalkClassesAreAWarning(): void {
		putenv('ISTOTA_TEST_WITHOUT_TALK=1');
		$this->assertFalse(class_exists('OCA\Talk\Events\BotInstallEvent'));

		$output = new RecordingOutput();
		$this->step()->run($output);

		$this->assertSame([], $this->h->dispatcher->events);
		$this->assertCount(1, $output->of('warning'));
		$this->assertStringContainsString('Talk', $output->of('warning')[0]);
		$this->assertSame(64, strlen($this->h->settings->botSecret()));
	}

	public function testNameIsAString(): void {
		$this->assertNotSame('', $this->step()->getName());
	}
}
