<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\BackgroundJob\EnsureHomeConversations;
use OCA\Istota\Listener\UserEligibilityListener;
use OCA\Istota\Service\HomeConversation;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Talk\Events\BotEnabledEvent;
use OCP\Group\Events\UserAddedEvent;
use OCP\User\Events\UserCreatedEvent;

/**
 * Every user the sidecar lets use the bot gets one conversation with it, with the bot
 * enabled and a welcome; nobody else gets one, and nothing is made twice.
 */
class HomeConversationTest extends HarnessTestCase {
	protected function setUp(): void {
		parent::setUp();
		$this->h->clock->now = time();
		$this->h->directory->addUser('alice', 'Alice', null, ['family']);
		$this->h->directory->addUser('bob', 'Bob', null, ['guests']);
		$this->h->directory->addUser('istota', 'Istota');
		self::$sidecar->control(['access_groups' => ['family']]);
	}

	/** @return list<string> tokens where the Istota bot is enabled */
	private function botEnabledIn(): array {
		$tokens = [];
		foreach ($this->h->botConversations->rows as $row) {
			if ($row->getBotId() === Harness::BOT_ID && $row->getState() === 1) {
				$tokens[] = $row->getToken();
			}
		}
		return $tokens;
	}

	public function testAnAllowedUserGetsOneConversationWithTheBotAndOneWelcome(): void {
		$this->assertSame(HomeConversation::CREATED, $this->h->homeConversation()->ensure('alice'));
		$this->assertCount(1, $this->h->broker->created);
		$made = $this->h->broker->created[0];
		$this->assertSame('Istota', $made['name']);
		$this->assertSame(['alice'], $made['moderators'], 'alice is its only member');
		$this->assertSame([$made['token']], $this->botEnabledIn());
		$enabled = array_values(array_filter($this->h->dispatcher->events, static fn ($e): bool => $e instanceof BotEnabledEvent));
		$this->assertCount(1, $enabled, 'Talk hears that the bot joined, as with occ talk:bot:setup');
		$this->assertSame($made['token'], $this->h->homeConversation()->tokenOf('alice'));
		$this->assertSame(['alice' => ['token' => $made['token'], 'welcomes' => 1]], self::$sidecar->homes());

		// Again (setup run twice, a job queued twice): nothing new.
		$this->assertSame(HomeConversation::EXISTS, $this->h->homeConversation()->ensure('alice'));
		$this->assertCount(1, $this->h->broker->created);
		$this->assertSame([$made['token']], $this->botEnabledIn());
		$this->assertSame(1, self::$sidecar->homes()['alice']['welcomes']);
	}

	public function testNobodyOutsideTheAccessListGetsOne(): void {
		$this->assertSame(HomeConversation::NOT_ALLOWED, $this->h->homeConversation()->ensure('bob'));
		$this->assertSame(HomeConversation::SKIPPED, $this->h->homeConversation()->ensure('istota'), 'the bot account');
		$this->assertSame(HomeConversation::SKIPPED, $this->h->homeConversation()->ensure('nobody'));
		$this->h->directory->users['alice']->enabled = false;
		$this->assertSame(HomeConversation::SKIPPED, $this->h->homeConversation()->ensure('alice'), 'a disabled account');
		$this->assertSame([], $this->h->broker->created);
		$this->assertSame([], $this->botEnabledIn());
		$this->assertSame([], self::$sidecar->homes());
		$this->assertSame('', $this->h->homeConversation()->tokenOf('bob'));
	}

	public function testEveryoneAtOnce(): void {
		$this->assertSame([HomeConversation::CREATED => 1, HomeConversation::NOT_ALLOWED => 1, HomeConversation::SKIPPED => 1],
			$this->h->homeConversation()->ensureAll());
		$this->assertSame(['alice'], array_keys(self::$sidecar->homes()));
		// bob is let in later: the next run makes his and leaves alice's alone.
		self::$sidecar->control(['access_groups' => ['family', 'guests']]);
		$this->assertSame([HomeConversation::CREATED => 1, HomeConversation::EXISTS => 1, HomeConversation::SKIPPED => 1],
			$this->h->homeConversation()->ensureAll());
		$this->assertCount(2, $this->h->broker->created);
	}

	public function testAConversationTheUserDeletedIsNotMadeAgain(): void {
		$this->h->homeConversation()->ensure('alice');
		$this->h->rooms->removeRoom($this->h->homeConversation()->tokenOf('alice'));
		$this->assertSame(HomeConversation::DELETED, $this->h->homeConversation()->ensure('alice'));
		$this->assertCount(1, $this->h->broker->created);
	}

	public function testABotRemovedFromTheConversationIsEnabledAgain(): void {
		$this->h->homeConversation()->ensure('alice');
		$this->h->botConversations->rows = [];
		$this->assertSame(HomeConversation::EXISTS, $this->h->homeConversation()->ensure('alice'));
		$this->assertSame([$this->h->homeConversation()->tokenOf('alice')], $this->botEnabledIn());
	}

	public function testNothingIsMadeWhileTheSidecarCannotSayWhoMay(): void {
		$h = new Harness(FakeSidecar::deadUrl(), self::SECRET);
		try {
			$h->directory->addUser('alice', 'Alice');
			$h->directory->addUser('bob', 'Bob');
			$this->assertSame([HomeConversation::SIDECAR_DOWN => 2], $h->homeConversation()->ensureAll());
			$this->assertSame([], $h->broker->created);
		} finally {
			$h->close();
		}
	}

	public function testWithoutTalkNothingIsTried(): void {
		unset($this->h->apps->installed['spreed']);
		$this->assertSame(HomeConversation::NO_TALK, $this->h->homeConversation()->ensure('alice'));
		$this->assertSame([], self::$sidecar->users(), 'the sidecar was not even asked');
	}

	public function testTalkRefusingIsReportedAndRetriedLater(): void {
		$this->h->broker->failure = new \RuntimeException('database is locked');
		$this->assertSame(HomeConversation::FAILED, $this->h->homeConversation()->ensure('alice'));
		$this->assertSame('', $this->h->homeConversation()->tokenOf('alice'));
		$this->h->broker->failure = null;
		$this->assertSame(HomeConversation::CREATED, $this->h->homeConversation()->ensure('alice'));
	}

	public function testTheTriggersQueueTheJobAndTheJobDoesIt(): void {
		$listener = new UserEligibilityListener($this->h->jobs);
		$listener->handle(new UserCreatedEvent($this->h->directory->users['alice']));
		$listener->handle(new UserAddedEvent($this->h->directory->users['alice']));
		$this->assertSame([[EnsureHomeConversations::class, ['uid' => 'alice']]], $this->h->jobs->jobs);

		$this->h->jobs->jobs = [];
		$this->h->adminService()->updateSettings(['workers' => ['max' => 2]]);
		$this->assertSame([], $this->h->jobs->jobs, 'only an access change queues the sweep');
		$this->h->adminService()->updateSettings(['access' => ['groups' => ['family']]]);
		$this->assertSame([[EnsureHomeConversations::class, null]], $this->h->jobs->jobs);

		$job = new EnsureHomeConversations($this->h->clock, $this->h->homeConversation());
		$run = new \ReflectionMethod($job, 'run');
		$run->invoke($job, ['uid' => 'alice']);
		$this->assertSame(['alice'], array_keys(self::$sidecar->homes()));
		$run->invoke($job, null);
		$this->assertCount(1, $this->h->broker->created);
	}
}
