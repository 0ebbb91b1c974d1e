<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\AttachmentException;
use OCP\Files\File;
use OCP\Files\Folder;
use OCP\Files\IRootFolder;
use OCP\IUserManager;
use Psr\Log\LoggerInterface;

/**
 * AttachmentImporter copies a file shared in Talk into the bot's storage, where the
 * sidecar's workspace mirror finds it: /Users/{uid}/inbox/ of the bot account
 * (ARCHITECTURE.md §3). The bot has no participant and cannot download the file itself
 * (talk-bots.md §4.5), but the app can resolve it server-side for the sharer (§12).
 *
 * It runs inside the sender's request, so it works only on file-share events of users the
 * sidecar lets use the bot (SessionService, cached), checks the size before reading a
 * byte, and never throws: every failure becomes an attachment error the sidecar can tell
 * the user about.
 */
class AttachmentImporter {
	/** Folder names inside the bot's storage, below its root: Users/{uid}/inbox. */
	private const USERS_FOLDER = 'Users';
	private const INBOX_FOLDER = 'inbox';
	/** Bytes of a file name we create; Nextcloud refuses names over 250, " (999)" must fit. */
	private const MAX_NAME_BYTES = 200;
	private const MAX_EXTENSION_CHARS = 16;
	private const MAX_SUFFIX = 999;
	/** Control, format (e.g. right-to-left override) and line-separator characters. */
	private const UNSAFE_CHARS = '/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u';
	/** The reason when the sidecar could not be asked whether the sender may use the bot. */
	public const ACCESS_UNKNOWN = 'the Istota service could not be asked whether you may use the bot, so the file was not copied; share it again later';

	public function __construct(
		private readonly IRootFolder $rootFolder,
		private readonly IUserManager $userManager,
		private readonly AppSettings $settings,
		private readonly SessionService $sessions,
		private readonly LoggerInterface $logger,
	) {
	}

	/**
	 * The fields to add to the sidecar payload for this event: nothing unless it is a file
	 * shared by a Nextcloud user the sidecar lets use the bot; then "attachments" with the
	 * copy, or "attachment_errors" saying why there is none (docs/app-sidecar-protocol.md).
	 * When the sidecar cannot say (it is down; the event then waits in the outbox), no copy
	 * is made and the error says so.
	 *
	 * @param array<string, mixed> $message BotInvokeEvent::getMessage()
	 * @param ?array{uid: string, ...} $sender EventPayloadBuilder::sender()
	 * @return array{attachments?: list<array{name: string, path: string, mimetype: string, size: int}>, attachment_errors?: list<array{name: string, reason: string}>}
	 */
	public function import(array $message, ?array $sender): array {
		$file = self::sharedFile($message);
		if ($file === null || $sender === null || !is_string($sender['uid'] ?? null) || $sender['uid'] === '') {
			return [];
		}
		$name = self::cleanName(is_scalar($file['name'] ?? null) ? (string)$file['name'] : '');
		$name = $name === '' ? 'file' : $name;
		$allowed = $this->sessions->mayUse($sender['uid']);
		if ($allowed === false) {
			return [];
		}
		if ($allowed === null) {
			return ['attachment_errors' => [['name' => $name, 'reason' => self::ACCESS_UNKNOWN]]];
		}
		try {
			return ['attachments' => [$this->copy((string)$sender['uid'], $file)]];
		} catch (AttachmentException $e) {
			return ['attachment_errors' => [['name' => $name, 'reason' => $e->getMessage()]]];
		} catch (\Throwable $e) {
			$this->logger->warning('Could not copy a file shared in Talk into the bot\'s storage', [
				'uid' => $sender['uid'],
				'file_id' => is_scalar($file['id'] ?? null) ? (string)$file['id'] : '',
				'exception' => $e,
			]);
			return ['attachment_errors' => [['name' => $name, 'reason' => 'it could not be copied']]];
		}
	}

	/**
	 * parameters.file of a file shared into the chat (talk-bots.md §4.5): an Activity
	 * whose object.name is "" (Talk ≤ 22), "message" (Talk 23+) or, as the sidecar also
	 * accepts, the system message id "file_shared"; null for anything else.
	 *
	 * @param array<string, mixed> $message
	 * @return ?array<string, mixed>
	 */
	public static function sharedFile(array $message): ?array {
		if (($message['type'] ?? null) !== 'Activity') {
			return null;
		}
		$object = $message['object'] ?? null;
		if (!is_array($object) || !in_array($object['name'] ?? null, ['', 'message', 'file_shared'], true) || !is_string($object['content'] ?? null)) {
			return null;
		}
		$content = json_decode($object['content'], true);
		$file = is_array($content) && is_array($content['parameters'] ?? null) ? ($content['parameters']['file'] ?? null) : null;
		if (!is_array($file) || (isset($file['type']) && $file['type'] !== 'file')) {
			return null;
		}
		return $file;
	}

	/**
	 * A file name safe to create: no path separators, control or format characters, no
	 * leading dots (hidden, "..") or trailing dots and spaces, at most 200 bytes with the
	 * extension kept; "attachment" when nothing is left.
	 */
	public static function safeName(string $name): string {
		$name = str_replace(['/', '\\'], '', self::cleanName($name));
		$name = (string)preg_replace(['/^[\s.]+/u', '/[\s.]+$/u'], '', $name);
		if ($name === '') {
			return 'attachment';
		}
		[$base, $extension] = self::splitExtension($name);
		$room = self::MAX_NAME_BYTES - ($extension === '' ? 0 : strlen($extension) + 1);
		if (strlen($base) > $room) {
			$base = (string)preg_replace('/[\s.]+$/u', '', mb_strcut($base, 0, $room, 'UTF-8'));
		}
		return $extension === '' ? $base : $base . '.' . $extension;
	}

	/**
	 * @param array<string, mixed> $file parameters.file
	 * @return array{name: string, path: string, mimetype: string, size: int}
	 * @throws AttachmentException with the reason for the user
	 */
	private function copy(string $uid, array $file): array {
		$botUser = $this->settings->botUser();
		if (!$this->userManager->userExists($botUser)) {
			throw new AttachmentException('the bot account is not set up yet (occ istota:setup)');
		}
		if (!self::isPlainSegment($uid)) {
			throw new AttachmentException('the sender\'s user id cannot name a folder');
		}
		$id = $file['id'] ?? null;
		if (!(is_int($id) || (is_string($id) && ctype_digit($id))) || (int)$id <= 0) {
			throw new AttachmentException('Talk did not say which file it is');
		}

		$source = $this->resolve($uid, (int)$id);
		$limit = $this->settings->maxAttachmentBytes();
		$size = $source->getSize();
		$size = is_int($size) || is_float($size) ? (int)$size : -1;
		if ($size > $limit) {
			throw new AttachmentException(self::tooLarge($limit));
		}

		$inbox = $this->inbox($botUser, $uid);
		$free = $inbox->getFreeSpace();
		// Negative values are FileInfo::SPACE_NOT_COMPUTED / SPACE_UNKNOWN / SPACE_UNLIMITED.
		if ((is_int($free) || is_float($free)) && $free >= 0 && $free < max($size, 0)) {
			throw new AttachmentException('there is no room for it in the bot\'s storage');
		}
		$target = self::freeName($inbox, self::safeName((string)$source->getName()));
		[$stream, $size] = self::open($source, $size, $limit);
		try {
			$inbox->newFile($target, $stream);
		} catch (\Throwable $e) {
			$this->removePartial($inbox, $target);
			$this->logger->warning('Could not write a file shared in Talk into the bot\'s storage', ['uid' => $uid, 'exception' => $e]);
			throw new AttachmentException('it could not be saved in the bot\'s storage');
		} finally {
			if (is_resource($stream)) {
				fclose($stream);
			}
		}
		return [
			'name' => self::cleanName((string)$source->getName()),
			'path' => self::INBOX_FOLDER . '/' . $target,
			'mimetype' => (string)$source->getMimeType(),
			'size' => $size,
		];
	}

	/** The shared file as the sharer sees it: the first readable File node with that id. */
	private function resolve(string $uid, int $id): File {
		$folderSeen = false;
		foreach ($this->rootFolder->getUserFolder($uid)->getById($id) as $node) {
			if ($node instanceof File && $node->isReadable()) {
				return $node;
			}
			$folderSeen = $folderSeen || $node instanceof Folder;
		}
		throw new AttachmentException($folderSeen ? 'folders are not copied' : 'the file was not found in the sender\'s files');
	}

	/** Users/{uid}/inbox in the bot's storage, each level created when missing. */
	private function inbox(string $botUser, string $uid): Folder {
		$folder = $this->rootFolder->getUserFolder($botUser);
		foreach ([self::USERS_FOLDER, $uid, self::INBOX_FOLDER] as $segment) {
			if (!$folder->nodeExists($segment)) {
				$folder = $folder->newFolder($segment);
				continue;
			}
			$node = $folder->get($segment);
			if (!$node instanceof Folder) {
				throw new AttachmentException('the inbox folder in the bot\'s storage is not a folder');
			}
			$folder = $node;
		}
		return $folder;
	}

	/**
	 * A stream of the file's content and its size. When the file cache does not know the
	 * size, at most one byte more than the limit is read, so an unknown size is still bounded.
	 *
	 * @return array{0: resource, 1: int}
	 */
	private static function open(File $source, int $size, int $limit): array {
		$in = $source->fopen('rb');
		if (!is_resource($in)) {
			throw new AttachmentException('it could not be read');
		}
		if ($size >= 0) {
			return [$in, $size];
		}
		$buffer = fopen('php://temp', 'w+b');
		$copied = $buffer === false ? false : stream_copy_to_stream($in, $buffer, $limit + 1);
		fclose($in);
		if ($copied === false || $copied > $limit) {
			if (is_resource($buffer)) {
				fclose($buffer);
			}
			throw new AttachmentException($copied === false ? 'it could not be read' : self::tooLarge($limit));
		}
		rewind($buffer);
		return [$buffer, $copied];
	}

	/** $name, or "base (2).ext", "base (3).ext", … : an existing file is never overwritten. */
	private static function freeName(Folder $folder, string $name): string {
		if (!$folder->nodeExists($name)) {
			return $name;
		}
		[$base, $extension] = self::splitExtension($name);
		for ($n = 2; $n <= self::MAX_SUFFIX; $n++) {
			$candidate = $base . ' (' . $n . ')' . ($extension === '' ? '' : '.' . $extension);
			if (!$folder->nodeExists($candidate)) {
				return $candidate;
			}
		}
		throw new AttachmentException('there are too many files with this name in inbox/');
	}

	private function removePartial(Folder $folder, string $name): void {
		try {
			if ($folder->nodeExists($name)) {
				$folder->get($name)->delete();
			}
		} catch (\Throwable $e) {
			$this->logger->warning('Could not remove a partly written attachment', ['exception' => $e]);
		}
	}

	/**
	 * [base, extension]: the extension is what follows the last dot, when there is a base
	 * before it and it is short and without spaces; otherwise ''.
	 *
	 * @return array{0: string, 1: string}
	 */
	private static function splitExtension(string $name): array {
		$dot = strrpos($name, '.');
		if ($dot === false || $dot === 0) {
			return [$name, ''];
		}
		$extension = substr($name, $dot + 1);
		if ($extension === '' || mb_strlen($extension, 'UTF-8') > self::MAX_EXTENSION_CHARS || preg_match('/\s/u', $extension) === 1) {
			return [$name, ''];
		}
		return [substr($name, 0, $dot), $extension];
	}

	/** The name without control, format and line-separator characters; invalid UTF-8 is scrubbed. */
	private static function cleanName(string $name): string {
		$name = mb_scrub($name, 'UTF-8');
		return trim((string)preg_replace(self::UNSAFE_CHARS, '', $name));
	}

	private static function isPlainSegment(string $segment): bool {
		return $segment !== '' && $segment !== '.' && $segment !== '..'
			&& strpbrk($segment, "/\\") === false && preg_match(self::UNSAFE_CHARS, $segment) === 0;
	}

	private static function tooLarge(int $limit): string {
		return sprintf('it is larger than the %d MB limit for files shared with the bot', intdiv($limit, 1024 * 1024));
	}
}
