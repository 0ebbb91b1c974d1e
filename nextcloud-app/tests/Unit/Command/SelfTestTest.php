<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Command;

use OCA\Istota\Command\SelfTest;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\FakeSidecarTestCase;
use OCA\Istota\Tests\Support\Harness;
use Symfony\Component\Console\Command\Command;
use Symfony\Component\Console\Tester\CommandTester;

class SelfTestTest extends FakeSidecarTestCase {
	/** @var list<Harness> */
	private array $harnesses = [];

	protected function tearDown(): void {
		foreach ($this->harnesses as $h) {
			$h->close();
		}
	}

	private function harness(string $url, ?string $secret = self::SECRET): Harness {
		$h = new Harness($url, $secret);
		$h->settings->ensureBotSecret();
		return $this->harnesses[] = $h;
	}

	/** @return array{0: int, 1: list<string>, 2: string} exit code, lines, raw output */
	private function runCommand(Harness $h): array {
		$tester = new CommandTester(new SelfTest($h->selfTest()));
		$tester->execute([]);
		$display = $tester->getDisplay();
		$this->assertStringNotContainsString(self::SECRET, $display, 'never print the shared secret');
		$this->assertStringNotContainsString($h->settings->botSecret(), $display, 'never print the bot secret');
		return [$tester->getStatusCode(), array_values(array_filter(explode("\n", $display))), $display];
	}

	public function testAllGreenAgainstARunningSidecar(): void {
		[$code, $lines] = $this->runCommand($this->harness(self::$sidecar->url));
		$this->assertSame(Command::SUCCESS, $code);
		$this->assertCount(5, $lines);
		foreach ($lines as $line) {
			$this->assertStringStartsWith('✓ ', $line);
		}
		$this->assertStringContainsString('version fake-1.2.3', $lines[1]);
		$this->assertStringStartsWith('✓ signed round trip', $lines[2]);
		$this->assertStringContainsString('Talk 21.1.0', $lines[3]);
		$this->assertStringStartsWith('✓ outbox: empty', $lines[4]);
		$this->assertContains(['method' => 'POST', 'uri' => '/v1/ping', 'status' => 200], self::$sidecar->requests());
	}

	public function testSidecarDown(): void {
		[$code, $lines] = $this->runCommand($this->harness(FakeSidecar::deadUrl()));
		$this->assertSame(Command::FAILURE, $code);
		$this->assertStringStartsWith('✓ configuration', $lines[0]);
		$this->assertStringStartsWith('✗ sidecar reachable', $lines[1]);
		$this->assertStringStartsWith('✗ signed round trip', $lines[2]);
	}

	public function testWrongSecretFailsOnlyTheRoundTrip(): void {
		[$code, $lines] = $this->runCommand($this->harness(self::$sidecar->url, 'a-different-secret-0123456789-abcdefghijklmnopqrs'));
		$this->assertSame(Command::FAILURE, $code);
		$this->assertStringStartsWith('✓ sidecar reachable', $lines[1]);
		$this->assertStringStartsWith('✗ signed round trip', $lines[2]);
		$this->assertStringContainsString('bad_signature', $lines[2]);
		$this->assertStringContainsString('istota:setup', $lines[2]);
	}

	public function testMissingSecret(): void {
		[$code, $lines] = $this->runCommand($this->harness(self::$sidecar->url, null));
		$this->assertSame(Command::FAILURE, $code);
		$this->assertStringStartsWith('✗ configuration: no shared secret', $lines[0]);
		$this->assertStringStartsWith('✓ sidecar reachable', $lines[1]);
		$this->assertStringStartsWith('✗ signed round trip', $lines[2]);
	}

	public function testTalkMissing(): void {
		$h = $this->harness(self::$sidecar->url);
		unset($h->apps->installed['spreed']);
		[$code, $lines] = $this->runCommand($h);
		$this->assertSame(Command::FAILURE, $code);
		$this->assertStringStartsWith('✗ Talk bot', $lines[3]);
	}

	public function testWaitingOutboxIsReported(): void {
		$h = $this->harness(self::$sidecar->url);
		$h->outbox->enqueue('{}', 'tok', '1', 1795860000, 3, 'sidecar failed POST /v1/talk/events: HTTP 503 <unavailable>', 1795860060);
		$h->outbox->enqueue('{}', 'tok', '2', 1795860001);
		[$code, $lines, $raw] = $this->runCommand($h);
		$this->assertSame(Command::FAILURE, $code);
		$this->assertStringStartsWith('✗ outbox: 2 Talk event(s) waiting', $lines[4]);
		$this->assertStringContainsString('after 3 attempt(s)', $lines[4]);
		$this->assertStringContainsString('HTTP 503 <unavailable>', $raw, 'details are escaped, not eaten as console tags');
	}
}
