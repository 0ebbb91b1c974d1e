<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\AppFramework\Utility\ITimeFactory;
use OCP\IUser;
use OCP\IUserManager;

/**
 * EventPayloadBuilder turns a Talk bot invocation into the body of POST /v1/talk/events
 * (docs/app-sidecar-protocol.md): the event exactly as Talk gave it, plus what only
 * Nextcloud knows about the sender and the conversation. Whether the sender may use the
 * bot is not decided here: the sender carries its groups and the sidecar decides.
 */
class EventPayloadBuilder {
	public function __construct(
		private readonly IUserManager $userManager,
		private readonly UserProfile $profiles,
		private readonly TalkEnvironment $talk,
		private readonly ITimeFactory $time,
	) {
	}

	/**
	 * @param array<string, mixed> $message BotInvokeEvent::getMessage()
	 * @param ?IUser $sender who caused the event when the payload's actor cannot be
	 *                       trusted to say (a reaction, see TalkEventForwarder)
	 * @return array{bot_url: string, event: array<string, mixed>, sender: ?array<string, mixed>, conversation: array<string, mixed>, received_at: string}
	 */
	public function build(string $botUrl, array $message, ?IUser $sender = null): array {
		$actor = is_array($message['actor'] ?? null) ? $message['actor'] : [];
		return [
			'bot_url' => $botUrl,
			'event' => $message,
			'sender' => $sender !== null ? ['uid' => (string)$sender->getUID()] + $this->profiles->of($sender) : $this->sender($actor),
			'conversation' => $this->conversation($message),
			'received_at' => gmdate('Y-m-d\TH:i:sP', $this->time->getTime()),
		];
	}

	/**
	 * The JSON body for the sidecar. Invalid UTF-8 is substituted rather than failing:
	 * an event must never be lost to an encoding detail.
	 *
	 * @param array<string, mixed> $payload
	 */
	public function encode(array $payload): string {
		return json_encode($payload, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE);
	}

	/**
	 * The conversation token of any invocation type: target.id for messages and
	 * reactions, object.id for Join/Leave (which have no target).
	 *
	 * @param array<string, mixed> $message
	 */
	public static function conversationToken(array $message): string {
		$type = $message['type'] ?? '';
		$holder = ($type === 'Join' || $type === 'Leave') ? ($message['object'] ?? null) : ($message['target'] ?? null);
		return is_array($holder) && is_scalar($holder['id'] ?? null) ? (string)$holder['id'] : '';
	}

	/**
	 * The Talk message id of a chat or system message; '' for Join/Leave.
	 *
	 * @param array<string, mixed> $message
	 */
	public static function messageId(array $message): string {
		$type = $message['type'] ?? '';
		if ($type === 'Join' || $type === 'Leave') {
			return '';
		}
		$object = $message['object'] ?? null;
		return is_array($object) && is_scalar($object['id'] ?? null) ? (string)$object['id'] : '';
	}

	/**
	 * The plain text of a chat message (object.content is itself JSON); '' when absent.
	 *
	 * @param array<string, mixed> $message
	 */
	public static function messageText(array $message): string {
		$object = $message['object'] ?? null;
		if (!is_array($object) || !is_string($object['content'] ?? null)) {
			return '';
		}
		$content = json_decode($object['content'], true);
		return is_array($content) && is_string($content['message'] ?? null) ? $content['message'] : '';
	}

	/**
	 * Profile of a Nextcloud user who triggered the event; null for guests, federated
	 * users, bots and users that no longer exist.
	 *
	 * @param array<string, mixed> $actor
	 * @return ?array{uid: string, display_name: string, email: string, timezone: string, language: string, groups: list<string>, is_admin: bool}
	 */
	public function sender(array $actor): ?array {
		$id = is_string($actor['id'] ?? null) ? $actor['id'] : '';
		// "<attendee type>/<actor id>"; split on the first slash only.
		$parts = explode('/', $id, 2);
		if (count($parts) !== 2 || $parts[0] !== 'users' || $parts[1] === '') {
			return null;
		}
		$user = $this->userManager->get($parts[1]);
		if (!$user instanceof IUser) {
			return null;
		}
		return ['uid' => (string)$user->getUID()] + $this->profiles->of($user);
	}

	/**
	 * @param array<string, mixed> $message
	 * @return array{token: string, name: string, type: ?int, user_count: ?int, private: bool}
	 */
	public function conversation(array $message): array {
		$type = $message['type'] ?? '';
		$holder = ($type === 'Join' || $type === 'Leave') ? ($message['object'] ?? null) : ($message['target'] ?? null);
		$name = is_array($holder) && is_string($holder['name'] ?? null) ? $holder['name'] : '';
		$token = self::conversationToken($message);
		$info = $this->talk->describeConversation($token);
		$private = $info['type'] === TalkEnvironment::TYPE_NOTE_TO_SELF
			|| $info['type'] === TalkEnvironment::TYPE_ONE_TO_ONE
			|| $info['user_count'] === 1;
		return [
			'token' => $token,
			'name' => $name,
			'type' => $info['type'],
			'user_count' => $info['user_count'],
			'private' => $private,
		];
	}
}
