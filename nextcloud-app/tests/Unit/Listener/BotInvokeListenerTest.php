<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Listener;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Listener\BotInvokeListener;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Talk\Events\BotInvokeEvent;
use OCA\Talk\Room;
use OCP\EventDispatcher\Event;

/**
 * The Talk listener end to end: BotInvokeEvent in, signed HTTP to a real (fake) sidecar
 * out, 👀 reaction and outbox rows as the result.
 */
class BotInvokeListenerTest extends HarnessTestCase {
	private const ROOMS = [
		'grouptok' => [Room::TYPE_GROUP, 3],
		'notetok' => [Room::TYPE_NOTE_TO_SELF, 1],
		'solotok' => [Room::TYPE_GROUP, 1],
		'o2otok' => [Room::TYPE_ONE_TO_ONE, 2],
	];

	protected function harness(string $url, string $secret = self::SECRET): Harness {
		$h = new Harness($url, $secret, self::ROOMS);
		$h->directory->addUser('alice', 'Alice Liddell', 'alice@example.com', [], ['timezone' => 'Europe/Berlin', 'lang' => 'de']);
		$h->directory->addUser('bob', 'Bob', null, ['staff']);
		$h->directory->addUser('root', 'Admin', 'root@example.com', ['admin']);
		$h->directory->system['default_timezone'] = 'Europe/Vienna';
		return $h;
	}

	private function dispatch(BotInvokeEvent $event, ?Harness $h = null): BotInvokeEvent {
		(new BotInvokeListener(($h ?? $this->h)->forwarder))->handle($event);
		return $event;
	}

	/** A chat message exactly as Talk 21 hands it to app bots (talk-bots.md §12). */
	private static function create(string $token, string $id, string $text, string $actor = 'users/alice', string $url = 'nextcloudapp://istota'): BotInvokeEvent {
		return new BotInvokeEvent($url, [
			'type' => 'Create',
			'actor' => ['type' => 'Person', 'id' => $actor, 'name' => 'Alice Liddell', 'talkParticipantType' => '1'],
			'object' => [
				'type' => 'Note',
				'id' => $id,
				'name' => 'message',
				'content' => json_encode(['message' => $text, 'parameters' => []], JSON_UNESCAPED_UNICODE),
				'mediaType' => 'text/markdown',
			],
			'target' => ['type' => 'Collection', 'id' => $token, 'name' => 'Room ' . $token],
		]);
	}

	private static function like(string $token, string $id, string $emoji = '👀', string $actor = 'users/alice'): BotInvokeEvent {
		return new BotInvokeEvent('nextcloudapp://istota', [
			'type' => 'Like',
			'actor' => ['type' => 'Person', 'id' => $actor, 'name' => 'Alice Liddell', 'talkParticipantType' => '1'],
			'object' => ['type' => 'Note', 'id' => $id, 'name' => '', 'content' => '{"message":"May I? (approval #3)","parameters":[]}', 'mediaType' => 'text/markdown'],
			'target' => ['type' => 'Collection', 'id' => $token, 'name' => 'Room'],
			'content' => $emoji,
		]);
	}

	public function testForwardsThumbsAsAnswersWithTheReactingUserAsSender(): void {
		$this->h->directory->addUser('bob', 'Bob', 'bob@example.com');
		$this->h->loginAs('bob');
		// Talk before 22.0.9 names the reacted message's author (the bot) as actor.
		$event = $this->dispatch(self::like('grouptok', '5', '👍🏽', 'bots/bot-123'));
		$this->dispatch(self::like('grouptok', '5', '🎉'));
		$this->assertSame([], $event->getReactions());
		$events = self::$sidecar->events();
		$this->assertCount(1, $events);
		$this->assertSame('Like', $events[0]['payload']['event']['type']);
		$this->assertSame('bob', $events[0]['payload']['sender']['uid']);
	}

	public function testALikeWithoutASessionUserIsNotForwarded(): void {
		$this->h->loginAs(null);
		$this->dispatch(self::like('grouptok', '5', '👍'));
		$this->assertSame([], self::$sidecar->events());
	}

	public function testIgnoresOtherBots(): void {
		foreach (['nextcloudapp://call_summary_bot/en', 'nextcloudapp://istotaplus', 'https://istota.example.com'] as $url) {
			$event = $this->dispatch(self::create('grouptok', '1', '@Istota hello', url: $url));
			$this->assertSame([], $event->getReactions(), $url);
		}
		$this->assertSame([], $this->h->http->requests);
		$this->assertSame(0, $this->h->outbox->count());
	}

	public function testAcceptsOurBotUrlWithAPath(): void {
		$this->dispatch(self::create('grouptok', '1', 'hello', url: 'nextcloudapp://istota/en'));
		$this->assertCount(1, self::$sidecar->events());
	}

	public function testIgnoresLikeAndUndoBecauseOurOwnReactionComesBack(): void {
		$like = self::like('grouptok', '5');
		$undo = new BotInvokeEvent('nextcloudapp://istota', [
			'type' => 'Undo',
			'actor' => ['type' => 'Person', 'id' => 'users/alice', 'name' => 'Alice'],
			'object' => $like->getMessage(),
			'target' => ['type' => 'Collection', 'id' => 'grouptok', 'name' => 'Room'],
		]);
		$this->dispatch($like);
		$this->dispatch($undo);
		$this->assertSame([], $like->getReactions());
		$this->assertSame([], $undo->getReactions());
		$this->assertSame([], $this->h->http->requests);
		$this->assertSame(0, $this->h->outbox->count());
	}

	public function testIgnoresOtherEventClasses(): void {
		(new BotInvokeListener($this->h->forwarder))->handle(new Event());
		$this->assertSame([], $this->h->http->requests);
	}

	public function testForwardsTheEventWithWhatOnlyNextcloudKnows(): void {
		$this->h->clock->now = time();
		$event = self::create('grouptok', '42', 'Hallö @Istota, was steht heute an? 👋');
		$this->dispatch($event);

		$events = self::$sidecar->events();
		$this->assertCount(1, $events);
		$payload = $events[0]['payload'];
		$this->assertSame('nextcloudapp://istota', $payload['bot_url']);
		$this->assertSame($event->getMessage(), $payload['event'], 'the event is passed through unchanged');
		$this->assertSame([
			'uid' => 'alice',
			'display_name' => 'Alice Liddell',
			'email' => 'alice@example.com',
			'timezone' => 'Europe/Berlin',
			'language' => 'de',
			'groups' => [],
			'is_admin' => false,
		], $payload['sender']);
		$this->assertSame([
			'token' => 'grouptok',
			'name' => 'Room grouptok',
			'type' => Room::TYPE_GROUP,
			'user_count' => 3,
			'private' => false,
		], $payload['conversation']);
		$this->assertSame(gmdate('Y-m-d\TH:i:sP', $this->h->clock->now), $payload['received_at']);
		$this->assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$/', $payload['received_at']);
	}

	public function testSenderDefaultsComeFromTheSystemConfig(): void {
		$this->dispatch(self::create('grouptok', '1', 'hi', 'users/bob'));
		$sender = self::$sidecar->events()[0]['payload']['sender'];
		$this->assertSame('', $sender['email']);
		$this->assertSame('Europe/Vienna', $sender['timezone']);
		$this->assertSame('en', $sender['language']);
	}

	/** @return array<string, array{0: string}> */
	public function notNextcloudUsers(): array {
		return [
			'guest' => ['guests/5f2c0a'],
			'email guest' => ['emails/abc'],
			'federated user' => ['federated_users/carol@other.example.com'],
			'deleted user' => ['users/nobody'],
			'bot' => ['bots/bot-0123'],
		];
	}

	/** @dataProvider notNextcloudUsers */
	public function testSenderIsNullForAnyoneWhoIsNotANextcloudUser(string $actor): void {
		$this->dispatch(self::create('grouptok', '1', 'hi', $actor));
		$this->assertNull(self::$sidecar->events()[0]['payload']['sender']);
	}

	/**
	 * Access is the sidecar's decision (docs/user-api.md, "Access"): the sender carries the
	 * group ids and the admin flag, and no verdict of the app's own.
	 */
	public function testSenderCarriesGroupsAndTheAdminFlagForTheSidecarToDecide(): void {
		$this->h->directory->groups['staff'][] = 'root';
		$this->dispatch(self::create('grouptok', '1', 'hi', 'users/alice'));
		$this->dispatch(self::create('grouptok', '2', 'hi', 'users/bob'));
		$this->dispatch(self::create('grouptok', '3', 'hi', 'users/root'));
		$senders = array_map(static fn (array $e): array => $e['payload']['sender'], self::$sidecar->events());
		$this->assertSame([[], ['staff'], ['admin', 'staff']], array_column($senders, 'groups'));
		$this->assertSame([false, false, true], array_column($senders, 'is_admin'));
		foreach ($senders as $sender) {
			$this->assertArrayNotHasKey('allowed', $sender);
		}
	}

	public function testTheOldAllowedGroupsSettingNoLongerFiltersAnything(): void {
		$this->h->appConfig->setValueString(Application::APP_ID, 'allowed_groups', '["staff"]');
		$this->dispatch(self::create('grouptok', '1', 'hi', 'users/alice'));
		$this->assertCount(1, self::$sidecar->events());
		$this->assertArrayNotHasKey('allowed', self::$sidecar->events()[0]['payload']['sender']);
	}

	/** @return array<string, array{0: string, 1: bool}> */
	public function conversations(): array {
		return [
			'note to self' => ['notetok', true],
			'group with one user' => ['solotok', true],
			'one-to-one' => ['o2otok', true],
			'group of three' => ['grouptok', false],
		];
	}

	/** @dataProvider conversations */
	public function testPrivateConversations(string $token, bool $private): void {
		$this->dispatch(self::create($token, '1', 'hi'));
		$conversation = self::$sidecar->events()[0]['payload']['conversation'];
		$this->assertSame($private, $conversation['private']);
		$this->assertSame(self::ROOMS[$token][0], $conversation['type']);
		$this->assertSame(self::ROOMS[$token][1], $conversation['user_count']);
	}

	public function testWithoutTalkInternalsTypeAndCountAreNull(): void {
		$this->h->container->services = [];
		$this->dispatch(self::create('notetok', '1', 'hi'));
		$conversation = self::$sidecar->events()[0]['payload']['conversation'];
		$this->assertNull($conversation['type']);
		$this->assertNull($conversation['user_count']);
		$this->assertFalse($conversation['private']);
	}

	public function testUnknownConversationFallsBack(): void {
		$this->dispatch(self::create('unknowntok', '1', 'hi'));
		$conversation = self::$sidecar->events()[0]['payload']['conversation'];
		$this->assertSame(['token' => 'unknowntok', 'name' => 'Room unknowntok', 'type' => null, 'user_count' => null, 'private' => false], $conversation);
	}

	public function testReactsOnlyWhenTheSidecarSaysAddressed(): void {
		$plain = $this->dispatch(self::create('grouptok', '1', 'lunch anyone?'));
		$mention = $this->dispatch(self::create('grouptok', '2', '@istota what is the time?'));
		$this->assertSame([], $plain->getReactions());
		$this->assertSame(['👀'], $mention->getReactions());
	}

	public function testTheSidecarsDecisionWinsOverTheLocalRule(): void {
		self::$sidecar->control(['addressed' => false]);
		$this->assertSame([], $this->dispatch(self::create('notetok', '1', '!help'))->getReactions());
		self::$sidecar->control(['addressed' => true]);
		$this->assertSame(['👀'], $this->dispatch(self::create('grouptok', '2', 'no mention here'))->getReactions());
	}

	public function testJoinIsForwardedWithoutReaction(): void {
		$join = new BotInvokeEvent('nextcloudapp://istota', [
			'type' => 'Join',
			'actor' => ['type' => 'Application', 'id' => 'bots/bot-abc', 'name' => 'Istota'],
			'object' => ['type' => 'Collection', 'id' => 'grouptok', 'name' => 'Room grouptok'],
		]);
		self::$sidecar->control(['addressed' => true]);
		$this->dispatch($join);
		$payload = self::$sidecar->events()[0]['payload'];
		$this->assertSame('Join', $payload['event']['type']);
		$this->assertNull($payload['sender']);
		$this->assertSame('grouptok', $payload['conversation']['token']);
		$this->assertSame(3, $payload['conversation']['user_count']);
		$this->assertSame([], $join->getReactions());
	}

	/** @return array<string, array{0: string, 1: string, 2: bool}> */
	public function fallbackCases(): array {
		return [
			'private conversation' => ['notetok', 'what is on my calendar', true],
			'command' => ['grouptok', '  !status', true],
			'mention' => ['grouptok', 'hey @ISTOTA, summarise this', true],
			'mention at the end' => ['grouptok', 'thanks @Istota', true],
			'plain message' => ['grouptok', 'lunch anyone?', false],
			'longer name' => ['grouptok', 'ask @Istotabot', false],
			'mail address' => ['grouptok', 'write to me@istota.example', false],
		];
	}

	/** @dataProvider fallbackCases */
	public function testSidecarDownQueuesTheEventAndUsesTheLocalRule(string $token, string $text, bool $addressed): void {
		$h = $this->harness(FakeSidecar::deadUrl());
		try {
			$event = $this->dispatch(self::create($token, '9', $text), $h);
			$this->assertSame($addressed ? ['👀'] : [], $event->getReactions());

			$rows = $h->outbox->head(10);
			$this->assertCount(1, $rows);
			$this->assertSame($token, $rows[0]->conversationToken);
			$this->assertSame('9', $rows[0]->messageId);
			$this->assertSame(1, $rows[0]->attempts);
			$this->assertStringContainsString('did not answer', $rows[0]->lastError);
			$this->assertGreaterThan($rows[0]->createdAt, $rows[0]->nextAttemptAt);
			$body = json_decode($rows[0]->body, true);
			$this->assertSame($event->getMessage(), $body['event']);
			$this->assertSame('alice', $body['sender']['uid']);
			$this->assertStringNotContainsString(self::SECRET, $h->logger->dump());
			$this->assertCount(1, $h->logger->messages('warning'));
		} finally {
			$h->close();
		}
	}

	public function testAWrongSharedSecretQueuesTheEvent(): void {
		$h = $this->harness(self::$sidecar->url, 'not-the-sidecars-secret-0123456789-abcdefghijklmn');
		try {
			$event = $this->dispatch(self::create('notetok', '3', 'hello'), $h);
			$this->assertSame(['👀'], $event->getReactions());
			$this->assertSame(1, $h->outbox->count());
			$this->assertStringContainsString('bad_signature', $h->outbox->head(1)[0]->lastError);
			$this->assertStringNotContainsString('not-the-sidecars-secret', $h->logger->dump());
		} finally {
			$h->close();
		}
	}

	public function testNoSharedSecretYetQueuesTheEvent(): void {
		$h = $this->harness(self::$sidecar->url, '');
		try {
			$this->dispatch(self::create('notetok', '3', 'hello'), $h);
			$this->assertSame(1, $h->outbox->count());
			$this->assertSame([], self::$sidecar->requests());
		} finally {
			$h->close();
		}
	}

	public function testAPermanentRefusalIsLoggedNotQueued(): void {
		self::$sidecar->control(['talk_status' => 400]);
		$event = $this->dispatch(self::create('notetok', '3', 'hello'));
		$this->assertSame([], $event->getReactions());
		$this->assertSame(0, $this->h->outbox->count());
		$this->assertCount(1, $this->h->logger->messages('error'));
	}

	public function testWhileTheOutboxWaitsNewEventsAreAppendedBehindIt(): void {
		$now = time();
		$older = $this->h->outbox->enqueue('{"older":true}', 'grouptok', '1', $now - 30, 2, 'HTTP 503', $now + 3600);

		$event = $this->dispatch(self::create('notetok', '2', 'hello'));
		$event2 = $this->dispatch(self::create('grouptok', '3', 'lunch?'));

		$this->assertSame([], self::$sidecar->requests(), 'nothing may overtake the waiting event');
		$rows = $this->h->outbox->head(10);
		$this->assertSame([$older, $older + 1, $older + 2], array_map(static fn ($r) => $r->id, $rows));
		$this->assertSame(['1', '2', '3'], array_map(static fn ($r) => $r->messageId, $rows));
		$this->assertSame(0, $rows[1]->attempts);
		$this->assertSame(['👀'], $event->getReactions(), 'the local rule decides while queued');
		$this->assertSame([], $event2->getReactions());
	}

	public function testADueOutboxIsDrainedInOrderBeforeTheNewEvent(): void {
		$now = time();
		$old = self::create('grouptok', '1', 'first, while the sidecar was down');
		$body = $this->h->payloads->encode($this->h->payloads->build('nextcloudapp://istota', $old->getMessage()));
		$this->h->outbox->enqueue($body, 'grouptok', '1', $now - 30, 1, 'HTTP 503', $now - 1);

		self::$sidecar->control(['addressed' => false]);
		$event = $this->dispatch(self::create('grouptok', '2', '@Istota second'));

		$this->assertSame(['grouptok/1', 'grouptok/2'], self::$sidecar->eventKeys());
		$this->assertSame(0, $this->h->outbox->count());
		$this->assertSame([], $event->getReactions(), 'the sidecar answered for the new event: not addressed');
	}

	public function testNeverThrows(): void {
		$this->h->db->pdo()->exec('DROP TABLE oc_istota_outbox');
		$h = $this->h;
		$event = $this->dispatch(self::create('grouptok', '1', 'hi'), $h);
		$this->assertSame([], $event->getReactions());
		$this->assertCount(1, $h->logger->messages('error'));
		$this->assertStringNotContainsString(self::SECRET, $h->logger->dump());
	}
}
