<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\App\IAppManager;
use OCP\EventDispatcher\IEventDispatcher;
use OCP\IUser;
use Psr\Container\ContainerInterface;
use Psr\Log\LoggerInterface;

/**
 * TalkEnvironment is everything the app asks of Talk (app id "spreed") beyond its public
 * events. Talk may be missing or disabled, and its internal classes carry no stability
 * promise, so every class is named as a string, checked with class_exists and used inside
 * try/catch; callers get null instead of an error.
 */
class TalkEnvironment {
	public const APP_ID = 'spreed';
	public const INSTALL_EVENT = 'OCA\Talk\Events\BotInstallEvent';
	public const INVOKE_EVENT = 'OCA\Talk\Events\BotInvokeEvent';
	private const MANAGER = 'OCA\Talk\Manager';
	private const PARTICIPANT_SERVICE = 'OCA\Talk\Service\ParticipantService';
	private const BROKER = 'OCP\Talk\IBroker';
	private const BOT_SERVER_MAPPER = 'OCA\Talk\Model\BotServerMapper';
	private const BOT_CONVERSATION_MAPPER = 'OCA\Talk\Model\BotConversationMapper';
	private const BOT_CONVERSATION = 'OCA\Talk\Model\BotConversation';
	private const BOT_ENABLED_EVENT = 'OCA\Talk\Events\BotEnabledEvent';
	/** Talk's Bot::STATE_ENABLED. */
	private const BOT_STATE_ENABLED = 1;

	/** Why the bot may not post into a conversation for a user (postTarget). */
	public const NOT_PARTICIPANT = 'not_participant';
	public const READ_ONLY = 'read_only';
	public const NO_CHAT = 'no_chat_permission';
	public const FEDERATED = 'federated';
	public const BOT_NOT_ENABLED = 'bot_not_enabled';
	public const NO_TALK = 'no_talk';
	/** Talk's Attendee::PERMISSIONS_CHAT and Room::READ_ONLY. */
	private const PERMISSION_CHAT = 128;
	private const ROOM_READ_ONLY = 1;

	/** Conversation types of Talk's Room class (docs/constants.md). */
	public const TYPE_ONE_TO_ONE = 1;
	public const TYPE_NOTE_TO_SELF = 6;

	public function __construct(
		private readonly IAppManager $appManager,
		private readonly ContainerInterface $container,
		private readonly LoggerInterface $logger,
		private readonly IEventDispatcher $dispatcher,
	) {
	}

	/**
	 * Makes a group conversation named $name whose only member is $user, as its moderator,
	 * through Talk's public broker (OCP\Talk\IBroker). Returns its token.
	 *
	 * @throws \RuntimeException when Talk cannot make it
	 */
	public function createPrivateConversation(IUser $user, string $name): string {
		if (!interface_exists(self::BROKER)) {
			throw new \RuntimeException('Talk\'s conversation API is not available');
		}
		try {
			$broker = $this->container->get(self::BROKER);
			if (!$broker->hasBackend()) {
				throw new \RuntimeException('Talk is not enabled');
			}
			return (string)$broker->createConversation($name, [$user], $broker->newConversationOptions())->getId();
		} catch (\RuntimeException $e) {
			throw $e;
		} catch (\Throwable $e) {
			throw new \RuntimeException('Talk did not make the conversation: ' . $e->getMessage(), 0, $e);
		}
	}

	/** Whether a conversation with this token exists (false when Talk cannot tell). */
	public function conversationExists(string $token): bool {
		if ($token === '' || !class_exists(self::MANAGER)) {
			return false;
		}
		try {
			$this->container->get(self::MANAGER)->getRoomByToken($token);
			return true;
		} catch (\Throwable) {
			return false;
		}
	}

	/**
	 * Enables the bot with $botUrl in the conversation, as `occ talk:bot:setup` does (the
	 * conversation row, then BotEnabledEvent); nothing happens when it is enabled already.
	 * There is no public API for it, so Talk's internal mappers are used, guarded.
	 *
	 * @throws \RuntimeException when the bot is not installed or Talk refuses
	 */
	public function enableBot(string $token, string $botUrl): void {
		foreach ([self::MANAGER, self::BOT_SERVER_MAPPER, self::BOT_CONVERSATION_MAPPER, self::BOT_CONVERSATION] as $class) {
			if (!class_exists($class)) {
				throw new \RuntimeException('Talk\'s bot classes are not available (' . $class . ')');
			}
		}
		try {
			$room = $this->container->get(self::MANAGER)->getRoomByToken($token);
			$server = $this->container->get(self::BOT_SERVER_MAPPER)->findByUrl($botUrl);
		} catch (\Throwable $e) {
			throw new \RuntimeException('the bot or the conversation is unknown to Talk: ' . $e->getMessage(), 0, $e);
		}
		$botId = (int)$server->getId();
		$mapper = $this->container->get(self::BOT_CONVERSATION_MAPPER);
		try {
			foreach ($mapper->findForToken($token) as $row) {
				if ((int)$row->getBotId() === $botId) {
					return;
				}
			}
			$class = self::BOT_CONVERSATION;
			$row = new $class();
			$row->setBotId($botId);
			$row->setToken($token);
			$row->setState(self::BOT_STATE_ENABLED);
			$mapper->insert($row);
		} catch (\Throwable $e) {
			throw new \RuntimeException('Talk did not enable the bot: ' . $e->getMessage(), 0, $e);
		}
		if (class_exists(self::BOT_ENABLED_EVENT)) {
			try {
				$event = self::BOT_ENABLED_EVENT;
				$this->dispatcher->dispatchTyped(new $event($room, $server));
			} catch (\Throwable $e) {
				// The bot is enabled; only Talk's "joined" notice is missing.
				$this->logger->warning('Talk\'s BotEnabledEvent failed', ['token' => $token, 'exception' => $e]);
			}
		}
	}

	/** Whether Talk is enabled and new enough for in-process app bots (Talk 21+). */
	public function isAvailable(): bool {
		try {
			if (!$this->appManager->isInstalled(self::APP_ID)) {
				return false;
			}
		} catch (\Throwable $e) {
			$this->logger->warning('Could not ask whether Talk is enabled', ['exception' => $e]);
			return false;
		}
		return class_exists(self::INSTALL_EVENT) && class_exists(self::INVOKE_EVENT);
	}

	/** The installed Talk version, or '' when it cannot be told. */
	public function version(): string {
		try {
			return $this->appManager->getAppVersion(self::APP_ID);
		} catch (\Throwable) {
			return '';
		}
	}

	/**
	 * The conversation's type and number of users (guests excluded), through Talk's
	 * internal Manager and ParticipantService. Either is null when it cannot be had.
	 *
	 * @return array{type: ?int, user_count: ?int}
	 */
	public function describeConversation(string $token): array {
		$info = ['type' => null, 'user_count' => null];
		if ($token === '' || !class_exists(self::MANAGER)) {
			return $info;
		}
		try {
			$room = $this->container->get(self::MANAGER)->getRoomByToken($token);
			$info['type'] = (int)$room->getType();
		} catch (\Throwable $e) {
			$this->logger->debug('Talk conversation lookup failed', ['token' => $token, 'exception' => $e]);
			return $info;
		}
		if (!class_exists(self::PARTICIPANT_SERVICE)) {
			return $info;
		}
		try {
			$info['user_count'] = (int)$this->container->get(self::PARTICIPANT_SERVICE)->getNumberOfUsers($room);
		} catch (\Throwable $e) {
			$this->logger->debug('Talk user count failed', ['token' => $token, 'exception' => $e]);
		}
		return $info;
	}

	/**
	 * The conversations $uid is a participant of, with whether the bot with $botUrl is
	 * enabled in each; null when Talk cannot tell. Federated conversations are left out:
	 * no bot can post there.
	 *
	 * @return list<array{token: string, name: string, type: int, bot_enabled: bool}>|null
	 */
	public function conversationsOf(string $uid, string $botUrl): ?array {
		if (!class_exists(self::MANAGER)) {
			return null;
		}
		try {
			$rooms = $this->container->get(self::MANAGER)->getRoomsForUser($uid);
		} catch (\Throwable $e) {
			$this->logger->warning('Talk conversation list failed', ['user' => $uid, 'exception' => $e]);
			return null;
		}
		$enabled = $this->botEnabledTokens($botUrl);
		$out = [];
		foreach ($rooms as $room) {
			try {
				if ($room->isFederatedConversation()) {
					continue;
				}
				$token = (string)$room->getToken();
				$out[] = ['token' => $token, 'name' => (string)$room->getDisplayName($uid), 'type' => (int)$room->getType(),
					'bot_enabled' => $enabled !== null && $enabled($token)];
			} catch (\Throwable $e) {
				$this->logger->debug('Talk conversation skipped', ['exception' => $e]);
			}
		}
		usort($out, static fn (array $a, array $b): int => [$a['name'], $a['token']] <=> [$b['name'], $b['token']]);
		return $out;
	}

	/**
	 * Whether the bot with $botUrl may post into conversation $token on behalf of $uid:
	 * $uid is a participant who may chat, the conversation is writable and local, and the
	 * bot is enabled in it. "problem" is null when it may, else one of the constants above;
	 * a conversation that does not exist is NOT_PARTICIPANT, so nobody learns of others'.
	 *
	 * @return array{problem: ?string, name: string, type: int}
	 */
	public function postTarget(string $uid, string $token, string $botUrl): array {
		$out = ['problem' => self::NO_TALK, 'name' => '', 'type' => 0];
		if (!class_exists(self::MANAGER) || !class_exists(self::PARTICIPANT_SERVICE)) {
			return $out;
		}
		try {
			$room = $this->container->get(self::MANAGER)->getRoomByToken($token);
			$participant = $this->container->get(self::PARTICIPANT_SERVICE)->getParticipant($room, $uid, false);
		} catch (\Throwable $e) {
			$this->logger->debug('Talk participant lookup failed', ['token' => $token, 'exception' => $e]);
			return ['problem' => self::NOT_PARTICIPANT, 'name' => '', 'type' => 0];
		}
		try {
			$out['name'] = (string)$room->getDisplayName($uid);
			$out['type'] = (int)$room->getType();
			if ($room->isFederatedConversation()) {
				$out['problem'] = self::FEDERATED;
			} elseif ((int)$room->getReadOnly() === self::ROOM_READ_ONLY) {
				$out['problem'] = self::READ_ONLY;
			} elseif (((int)$participant->getPermissions() & self::PERMISSION_CHAT) === 0) {
				$out['problem'] = self::NO_CHAT;
			} else {
				$enabled = $this->botEnabledTokens($botUrl);
				$out['problem'] = $enabled !== null && $enabled($token) ? null : self::BOT_NOT_ENABLED;
			}
		} catch (\Throwable $e) {
			$this->logger->warning('Talk conversation check failed', ['token' => $token, 'exception' => $e]);
			$out['problem'] = self::NO_TALK;
		}
		return $out;
	}

	/**
	 * A test "is the bot with $botUrl enabled in this conversation", or null when Talk's bot
	 * classes cannot tell.
	 *
	 * @return (\Closure(string): bool)|null
	 */
	private function botEnabledTokens(string $botUrl): ?\Closure {
		if (!class_exists(self::BOT_SERVER_MAPPER) || !class_exists(self::BOT_CONVERSATION_MAPPER)) {
			return null;
		}
		try {
			$server = $this->container->get(self::BOT_SERVER_MAPPER)->findByUrl($botUrl);
			$mapper = $this->container->get(self::BOT_CONVERSATION_MAPPER);
		} catch (\Throwable) {
			return null; // the bot is not installed
		}
		if (method_exists($server, 'getState') && (int)$server->getState() === 0) {
			return static fn (string $token): bool => false;
		}
		$botId = (int)$server->getId();
		return static function (string $token) use ($mapper, $botId): bool {
			foreach ($mapper->findForToken($token) as $row) {
				if ((int)$row->getBotId() === $botId && (int)$row->getState() !== 0) {
					return true;
				}
			}
			return false;
		};
	}
}
