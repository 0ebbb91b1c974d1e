<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;

/** Who may use the bot, as the sidecar says, cached per request and for 60 s. */
class SessionServiceTest extends HarnessTestCase {
	protected function setUp(): void {
		parent::setUp();
		// Real time: the clock also signs the requests, and the sidecar refuses stale ones.
		$this->h->clock->now = time();
		$this->h->directory->addUser('alice', 'Alice');
		$this->h->directory->addUser('bob', 'Bob', null, ['staff']);
		$this->h->directory->addUser('root', 'Root', null, ['admin']);
	}

	private function sessionCalls(): int {
		return count(array_filter(self::$sidecar->requests(), static fn (array $r): bool => str_ends_with($r['uri'], '/session')));
	}

	public function testTheSidecarDecides(): void {
		self::$sidecar->control(['access_groups' => ['staff']]);
		$this->assertFalse($this->h->sessionService()->mayUse('alice'));
		$this->assertTrue($this->h->sessionService()->mayUse('bob'));
		$this->assertTrue($this->h->sessionService()->mayUse('root'), 'admins always may');
	}

	public function testAnswersAreCachedForAMinuteAcrossRequests(): void {
		$this->assertTrue($this->h->sessionService()->mayUse('alice'));
		$this->assertTrue($this->h->sessionService()->mayUse('alice'));
		$this->assertSame(1, $this->sessionCalls());

		self::$sidecar->control(['access_groups' => ['staff']]);
		$this->h->clock->now += 59;
		$this->assertTrue($this->h->sessionService()->mayUse('alice'), 'still the cached answer');
		$this->h->clock->now += 2;
		$this->assertFalse($this->h->sessionService()->mayUse('alice'), 'asked again after 60 s');
		$this->assertSame(2, $this->sessionCalls());
	}

	public function testWithinOneRequestTheSidecarIsAskedOnce(): void {
		$sessions = $this->h->sessionService();
		$sessions->open('alice');
		$this->h->cache->store = [];
		$sessions->ensure('alice');
		$this->assertTrue($sessions->mayUse('alice'));
		$this->assertSame(1, $this->sessionCalls());
	}

	public function testOpenAlwaysAsksAndRefreshesTheCache(): void {
		$this->h->sessionService()->mayUse('alice');
		self::$sidecar->control(['access_groups' => ['staff']]);
		$this->assertFalse($this->h->sessionService()->open('alice')['allowed']);
		$this->assertFalse($this->h->sessionService()->mayUse('alice'), 'the fresh answer replaced the cached one');
		$this->assertSame(2, $this->sessionCalls());
	}

	public function testUnknownWhenTheSidecarCannotBeAsked(): void {
		$down = new Harness(FakeSidecar::deadUrl(), self::SECRET);
		$noSecret = new Harness(self::$sidecar->url, null);
		$wrongSecret = new Harness(self::$sidecar->url, 'not-the-secret-0123456789-0123456789-abcdefghij');
		try {
			foreach ([$down, $noSecret, $wrongSecret] as $h) {
				$h->directory->addUser('alice', 'Alice');
				$this->assertNull($h->sessionService()->mayUse('alice'));
				$this->assertSame([], $h->cache->keys(), 'an unknown answer is not cached');
			}
			$this->assertNull($this->h->sessionService()->mayUse('nobody'), 'no such Nextcloud user');
		} finally {
			$down->close();
			$noSecret->close();
			$wrongSecret->close();
		}
	}

	public function testTheCacheKeyDoesNotHoldTheUserIdInClear(): void {
		$this->h->sessionService()->mayUse('alice');
		$keys = $this->h->cache->keys();
		$this->assertCount(1, $keys);
		$this->assertSame('istota-session/' . hash('sha256', 'alice'), $keys[0]);
	}
}
